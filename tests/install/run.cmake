# ctest driver: install the build tree into a scratch prefix, then build and run a consumer
# through find_package(spool) and through pkg-config, and build and run samples/hello.c the same
# ways (through pkg-config twice: with LD_LIBRARY_PATH, and with an rpath instead, as the README
# says). Needs -DBUILD_DIR, -DSOURCE_DIR (tests/install), -DWORK_DIR, -DVERSION.
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
get_filename_component(hello "${SOURCE_DIR}/../../samples/hello.c" ABSOLUTE)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# samples/hello.c: it must end with "hello: ok", or, where no CUDA device can be opened, exit 77
# with its one line saying so; then it was built, linked and loaded, which is what can be checked
# without a GPU. A library the loader cannot find is exit 127 and fails the test.
function(run_hello)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  list(GET ARGN -1 program)
  if(rc EQUAL 77 AND err MATCHES "hello: no CUDA device")
    message(STATUS "${program}: built and loaded; no CUDA device to run on")
  elseif(NOT rc EQUAL 0 OR NOT out MATCHES "hello: ok")
    message(FATAL_ERROR "hello failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

# find_package
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/cmake-build" -DCMAKE_PREFIX_PATH=${prefix}
    -DSPOOL_HELLO=${hello})
run(${CMAKE_COMMAND} --build "${WORK_DIR}/cmake-build")
run("${WORK_DIR}/cmake-build/consumer")
if(NOT last_output MATCHES "spool ${VERSION}")
  message(FATAL_ERROR "find_package consumer printed '${last_output}', wanted spool ${VERSION}")
endif()
run_hello("${WORK_DIR}/cmake-build/hello") # CMake wrote the rpath of the imported library

# pkg-config
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  file(GLOB pcdir "${prefix}/lib*/pkgconfig")
  # Only the scratch prefix: no sysroot or search path of the caller's may redirect it.
  set(ENV{PKG_CONFIG_PATH} "${pcdir}")
  set(ENV{PKG_CONFIG_LIBDIR} "${pcdir}")
  unset(ENV{PKG_CONFIG_SYSROOT_DIR})
  run(${PKG_CONFIG} --cflags --libs spool)
  string(STRIP "${last_output}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run(${PKG_CONFIG} --variable=libdir spool)
  string(STRIP "${last_output}" libdir)
  get_filename_component(libdir "${libdir}" ABSOLUTE) # prefix/lib/pkgconfig/../../lib: prefix/lib
  # The caller's path stays behind ours: it may be where libcudart is found.
  set(ld_path "LD_LIBRARY_PATH=${libdir}")
  if(DEFINED ENV{LD_LIBRARY_PATH} AND NOT "$ENV{LD_LIBRARY_PATH}" STREQUAL "")
    string(APPEND ld_path ":$ENV{LD_LIBRARY_PATH}")
  endif()
  find_program(CC NAMES cc gcc clang REQUIRED)
  run(${CC} -std=c11 "${SOURCE_DIR}/consumer.c" -o "${WORK_DIR}/consumer-pc" ${flags})
  run(${CMAKE_COMMAND} -E env "${ld_path}" "${WORK_DIR}/consumer-pc")
  if(NOT last_output MATCHES "spool ${VERSION}")
    message(FATAL_ERROR "pkg-config consumer printed '${last_output}'")
  endif()
  run(${CC} -std=c11 "${hello}" -o "${WORK_DIR}/hello-pc" ${flags})
  run_hello(${CMAKE_COMMAND} -E env "${ld_path}" "${WORK_DIR}/hello-pc")
  # Without LD_LIBRARY_PATH: the library's directory recorded in the program (a shared build
  # needs it; a static one ignores it).
  run(${CC} -std=c11 "${hello}" -o "${WORK_DIR}/hello-rpath" ${flags} "-Wl,-rpath,${libdir}")
  run_hello("${WORK_DIR}/hello-rpath")
  run(${PKG_CONFIG} --modversion spool)
  if(NOT last_output MATCHES "${VERSION}")
    message(FATAL_ERROR "pkg-config --modversion gave '${last_output}'")
  endif()
endif()
message(STATUS "install consumer: OK (spool ${VERSION})")
