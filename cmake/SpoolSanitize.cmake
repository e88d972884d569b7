# Sanitizer and fuzzer builds (the reliability gates of scripts/test).
#
#   -DSPOOL_SANITIZE=address,undefined   ASan + UBSan on the library, cudasim and the tests
#   -DSPOOL_SANITIZE=thread              TSan on the same targets
#   -DSPOOL_FUZZ=ON                      the libFuzzer target tests/fuzz/fuzz_config (needs clang
#                                        and its runtime: Debian's clang + libclang-rt-dev)
#
# A sanitized build is meant for the sim and cpu suites (scripts/test builds one without samples
# and runs `ctest -L "sim|cpu"`). Targets linked by nvcc (samples, benchmarks, the GPU stress
# test) are not sanitized and are left out of such a build.

set(SPOOL_SANITIZE "" CACHE STRING
    "Sanitizers for the library, cudasim and the tests, as -fsanitize takes them: \
address,undefined or thread (empty: none)")
set(SPOOL_FUZZ AUTO CACHE STRING
    "Build the libFuzzer config-parser target: ON, OFF, or AUTO (when the C compiler is clang and \
libFuzzer links)")
set_property(CACHE SPOOL_FUZZ PROPERTY STRINGS AUTO ON OFF)

set(SPOOL_SANITIZE_FLAGS "")
if(SPOOL_SANITIZE)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "spool: SPOOL_SANITIZE needs GCC or Clang (C compiler: ${CMAKE_C_COMPILER_ID})")
  endif()
  if(SPOOL_SANITIZE MATCHES "thread" AND SPOOL_SANITIZE MATCHES "address")
    message(FATAL_ERROR "spool: SPOOL_SANITIZE cannot combine thread and address")
  endif()
  # -fno-sanitize-recover=all: a UBSan finding ends the test with an error instead of a line on
  # stderr that a passing test would hide.
  set(SPOOL_SANITIZE_FLAGS -fsanitize=${SPOOL_SANITIZE} -fno-omit-frame-pointer
      -fno-sanitize-recover=all)
  message(STATUS "spool: sanitizers ${SPOOL_SANITIZE}")
endif()

# spool_sanitize(target): the SPOOL_SANITIZE flags on the target's compile and link lines. On a
# static library the link flags are INTERFACE, so that whatever links it gets the runtime.
function(spool_sanitize target)
  if(NOT SPOOL_SANITIZE_FLAGS)
    return()
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C>:${SPOOL_SANITIZE_FLAGS}>)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "STATIC_LIBRARY")
    target_link_options(${target} INTERFACE ${SPOOL_SANITIZE_FLAGS})
  else()
    target_link_options(${target} PRIVATE ${SPOOL_SANITIZE_FLAGS})
  endif()
endfunction()

# Whether the fuzz target is built (SPOOL_FUZZ_ENABLED).
set(SPOOL_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=all)
set(SPOOL_FUZZ_ENABLED OFF)
if(SPOOL_FUZZ AND NOT SPOOL_FUZZ STREQUAL "AUTO") # ON, TRUE, 1, ...
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "spool: SPOOL_FUZZ=ON needs clang as the C compiler (configure with "
                        "CC=clang; C compiler now: ${CMAKE_C_COMPILER_ID})")
  endif()
  set(SPOOL_FUZZ_ENABLED ON)
elseif(SPOOL_FUZZ STREQUAL "AUTO" AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
  check_c_source_compiles([[
    #include <stddef.h>
    #include <stdint.h>
    int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }
  ]] SPOOL_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  set(SPOOL_FUZZ_ENABLED ${SPOOL_HAVE_LIBFUZZER})
endif()
