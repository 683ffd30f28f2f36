# Helpers for the CMake-script tests: run a command or fail with its output,
# and check that a built consumer runs and says so.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out
                  ERROR_VARIABLE out)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# EMULATOR (qemu when cross-compiling) runs the consumer if set.
function(expect_consumer_runs consumer)
  run(${EMULATOR} "${consumer}")
  if(NOT last_output MATCHES "consumer ok")
    message(FATAL_ERROR "unexpected consumer output: ${last_output}")
  endif()
  message(STATUS "${last_output}")
endfunction()
