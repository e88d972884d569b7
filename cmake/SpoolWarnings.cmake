# spool_warnings(target): the project's warning set, as errors with SPOOL_WERROR (CI). The same
# flags for C and for C++ (the tests of include/spool/spool.hpp), each only where that
# language's compiler is GCC or Clang (C and C++ compilers may differ, e.g. CC=clang with g++).
# Other languages (CUDA) are left alone.
set(SPOOL_WARNING_FLAGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion)

function(spool_warnings target)
  foreach(lang C CXX)
    if(CMAKE_${lang}_COMPILER_ID MATCHES "GNU|Clang")
      target_compile_options(${target} PRIVATE
        "$<$<COMPILE_LANGUAGE:${lang}>:${SPOOL_WARNING_FLAGS}>")
      if(SPOOL_WERROR)
        target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:${lang}>:-Werror>")
      endif()
    endif()
  endforeach()
endfunction()
