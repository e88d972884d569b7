# The trace tools from the command line (CTest test `trace_tools`, label sim): a trace written
# on cudasim is dumped, summed up and replayed twice with the same figures; --help, bad usage
# and a damaged trace give their exit statuses; a process that exits without destroying its
# pool leaves every event in the trace; the advisor recommends and proves; with python3,
# a hand-made PyTorch snapshot is read with its known peak, a pickle holding a class is refused,
# export-torch keeps the peak and the heap's chunks, and plot draws (a stand-in matplotlib shows
# what) or says matplotlib is missing.
# -D: SAMPLE, TRACE_TOOL, REPLAY_SIM, ADVISE_SIM, REPLAY, ADVISE, PYTHON (may be empty),
# WORK_DIR.
file(MAKE_DIRECTORY "${WORK_DIR}")
set(trace "${WORK_DIR}/sample.sptr")

function(run want_rc out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR "${ARGN}: exit ${rc}, expected ${want_rc}\n${out}\n${err}")
  endif()
  set(${out_var} "${out}${err}" PARENT_SCOPE)
endfunction()

function(expect text pattern)
  if(NOT text MATCHES "${pattern}")
    message(FATAL_ERROR "output lacks '${pattern}':\n${text}")
  endif()
endfunction()

run(0 out "${SAMPLE}" "${WORK_DIR}/early.sptr" --exit-early)
run(0 out "${TRACE_TOOL}" stats "${WORK_DIR}/early.sptr")
expect("${out}" "events \\(no end record")
expect("${out}" "allocations: +10 \\(0 failed")
run(0 out "${SAMPLE}" "${trace}")
run(0 out "${TRACE_TOOL}" dump "${trace}")
expect("${out}" "^seq,time_us,thread,action,status,ptr,size,stream,buffer,capturing,site\n")
expect("${out}" ",alloc,SPOOL_OK,0x[0-9a-f]+,8192,0x[0-9a-f]+,1,0,\"[^\"]*trace_sample.c:[0-9]+\"")
expect("${out}" ",trim,SPOOL_OK,")
expect("${out}" ",record_stream,SPOOL_OK,")
run(0 out "${TRACE_TOOL}" stats "${trace}")
expect("${out}" "allocations: +600 \\(0 failed")
# the heap's peak as stats reads it, for the plot below (where the heap places the sample's
# buffers is the heap's business: the tools must only agree on it)
string(REGEX MATCH "heap chunks: +peak ([0-9.]+) MiB" heap_peak "${out}")
if(NOT heap_peak)
  message(FATAL_ERROR "stats names no heap peak:\n${out}")
endif()
set(heap_peak "${CMAKE_MATCH_1}")
expect("${out}" "streams: +3 seen")

run(0 a "${REPLAY_SIM}" "${trace}" --json --config recorded --config "cache=off")
run(0 b "${REPLAY_SIM}" "${trace}" --json --config recorded --config "cache=off")
string(REGEX REPLACE "\"ns_per_op\":[0-9.]+" "" a "${a}")
string(REGEX REPLACE "\"ns_per_op\":[0-9.]+" "" b "${b}")
if(NOT a STREQUAL b)
  message(FATAL_ERROR "two replays differ:\n${a}\n${b}")
endif()
expect("${a}" "\"runtime\":\"cudasim\"")
expect("${a}" "\"config\":\"cache=off\",\"ops\":[0-9]+")
run(0 out "${REPLAY_SIM}" "${trace}")
expect("${out}" "peak reserved")

run(0 out "${ADVISE_SIM}" "${trace}")
expect("${out}" "recommended: release_threshold=[0-9]+[KMG]iB, reserve=")
expect("${out}" "  max_size=[0-9]+[KMG]iB: the advice's replay reserved at most")
expect("${out}" "\\(defaults\\) .*\nrecommended ")
run(0 out "${ADVISE_SIM}" "${trace}" --json)
expect("${out}" "\"defaults\":\\{\"config\":\"\",\"ops\":")
run(0 out "${ADVISE_SIM}" --help)
run(0 out "${REPLAY}" --help) # the CUDA runtime's builds: --help needs no device
expect("${out}" "^usage: spool-replay TRACE")
run(0 out "${ADVISE}" --help)
expect("${out}" "^usage: spool-advise TRACE")
run(0 out "${TRACE_TOOL}" --help)
run(0 out "${REPLAY_SIM}" --help)
run(1 out "${TRACE_TOOL}" frobnicate "${trace}")
run(1 out "${REPLAY_SIM}" "${trace}" --bogus)
run(3 out "${REPLAY_SIM}" "${trace}" --config "front_limt=1")
expect("${out}" "front_limt")

file(WRITE "${WORK_DIR}/short.sptr" "SPOOLTRC")
run(2 out "${TRACE_TOOL}" stats "${WORK_DIR}/short.sptr")
expect("${out}" "short.sptr: 8 bytes: truncated")
run(2 out "${REPLAY_SIM}" "${WORK_DIR}/missing.sptr")
expect("${out}" "missing.sptr: cannot open")

if(NOT PYTHON)
  message(STATUS "no python3: the PyTorch snapshot checks are skipped")
  return()
endif()
# alloc 1000, alloc 3000, free the first, alloc 2500: the peak is 5500 bytes
set(snap "${WORK_DIR}/hand.pickle")
run(0 out "${PYTHON}" -c "import pickle
ev = lambda a, addr, size, t: dict(action=a, addr=addr, size=size, stream=7, time_us=t, frames=[])
trace = [ev('segment_alloc', 0x100000, 2097152, 1), ev('alloc', 0x100000, 1000, 2),
         ev('alloc', 0x100400, 3000, 3), ev('free_requested', 0x100000, 1000, 4),
         ev('free_completed', 0x100000, 1000, 5), ev('alloc', 0x101000, 2500, 6),
         ev('oom', 0, 1 << 40, 7), ev('free_requested', 0x100400, 3000, 8),
         ev('free_completed', 0x100400, 3000, 9)]
pickle.dump(dict(segments=[], device_traces=[trace]), open('${snap}', 'wb'))")
run(0 out "${TRACE_TOOL}" stats "${snap}")
expect("${out}" "torch format")
expect("${out}" "peak live: +5.37 KiB in 2 buffers")
expect("${out}" "allocations: +3 \\(1 failed, 1 out of memory\\), 2 frees")
run(0 out "${PYTHON}" -c "import pickle, collections
pickle.dump(collections.OrderedDict(a=1), open('${WORK_DIR}/class.pickle', 'wb'))")
run(2 out "${TRACE_TOOL}" stats "${WORK_DIR}/class.pickle")
expect("${out}" "holds a Python object \\(collections.OrderedDict\\)")
expect("${out}" "class.pickle: the snapshot helper failed")

run(0 out "${TRACE_TOOL}" export-torch "${trace}" -o "${WORK_DIR}/export.pickle")
run(0 s1 "${TRACE_TOOL}" stats "${trace}")
run(0 s2 "${TRACE_TOOL}" stats "${WORK_DIR}/export.pickle")
string(REGEX MATCH "peak live: +[^\n]+\nmedian live: +[^\n]+\nheap chunks: +[^\n]+" p1 "${s1}")
string(REGEX MATCH "peak live: +[^\n]+\nmedian live: +[^\n]+\nheap chunks: +[^\n]+" p2 "${s2}")
if(NOT p1 STREQUAL p2 OR NOT p1)
  message(FATAL_ERROR "export-torch changed the peak: '${p1}' became '${p2}'")
endif()

# with a stand-in for matplotlib that writes down what it was asked to draw
run(0 out ${CMAKE_COMMAND} -E env "PYTHONPATH=${CMAKE_CURRENT_LIST_DIR}/fake_matplotlib"
    "${TRACE_TOOL}" plot "${trace}" -o "${WORK_DIR}/drawn.txt")
file(READ "${WORK_DIR}/drawn.txt" drawn)
expect("${drawn}" "total live: [0-9]+ points, top 6.78\n")
expect("${drawn}" "reserved \\(heap chunks\\): [0-9]+ points, top ${heap_peak}\n")
expect("${drawn}" "idle \\(reserved - live\\): ")
expect("${drawn}" "stream 0x[0-9a-f]+: ")
expect("${drawn}" "mark: 1 points")

# The real matplotlib, wherever the tool's Python finds one: a picture, or the message that
# says it is missing (exit 3). The tool's own Python is the judge: the test does not guess it.
file(REMOVE "${WORK_DIR}/plot.png")
execute_process(COMMAND "${TRACE_TOOL}" plot "${trace}" -o "${WORK_DIR}/plot.png"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 3)
  expect("${out}${err}" "matplotlib is not installed")
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR
          "spool-trace plot: exit ${rc}, expected 0 (drawn) or 3 (no matplotlib)\n${out}\n${err}")
elseif(NOT EXISTS "${WORK_DIR}/plot.png")
  message(FATAL_ERROR "spool-trace plot exited 0 but wrote no picture")
endif()
