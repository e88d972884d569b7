# spool_warnings(target): the project's warning set, as errors with SPOOL_WERROR (CI).
function(spool_warnings target)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion>)
    if(SPOOL_WERROR)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C>:-Werror>)
    endif()
  endif()
endfunction()
