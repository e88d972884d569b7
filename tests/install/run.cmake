# ctest driver: install the build tree into a scratch prefix, then build and run a consumer
# through find_package(spool) and through pkg-config. Needs -DBUILD_DIR, -DSOURCE_DIR, -DWORK_DIR,
# -DVERSION.
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

# find_package
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/cmake-build" -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build "${WORK_DIR}/cmake-build")
run("${WORK_DIR}/cmake-build/consumer")
if(NOT last_output MATCHES "spool ${VERSION}")
  message(FATAL_ERROR "find_package consumer printed '${last_output}', wanted spool ${VERSION}")
endif()

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
  find_program(CC NAMES cc gcc clang REQUIRED)
  run(${CC} -std=c11 "${SOURCE_DIR}/consumer.c" -o "${WORK_DIR}/consumer-pc" ${flags})
  run(${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${prefix}/lib" "${WORK_DIR}/consumer-pc")
  if(NOT last_output MATCHES "spool ${VERSION}")
    message(FATAL_ERROR "pkg-config consumer printed '${last_output}'")
  endif()
  run(${PKG_CONFIG} --modversion spool)
  if(NOT last_output MATCHES "${VERSION}")
    message(FATAL_ERROR "pkg-config --modversion gave '${last_output}'")
  endif()
endif()
message(STATUS "install consumer: OK (spool ${VERSION})")
