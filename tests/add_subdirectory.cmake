# Configures tests/subproject (which says add_subdirectory(mha)), checks that
# only the library is built by default (no tests, benchmarks or examples),
# then builds and runs its consumer.
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out
                  ERROR_VARIABLE out)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} -S "${SUBPROJECT_DIR}" -B "${WORK_DIR}"
    -DMHA_SOURCE_DIR=${MHA_SOURCE_DIR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK_DIR}" --target help)
foreach(unwanted mha_tests mha_benchmarks seed_demo)
  if(last_output MATCHES "${unwanted}")
    message(FATAL_ERROR "add_subdirectory(mha) defines ${unwanted} by default")
  endif()
endforeach()
run(${CMAKE_COMMAND} --build "${WORK_DIR}" -j2)
run("${WORK_DIR}/consumer")
if(NOT last_output MATCHES "consumer ok")
  message(FATAL_ERROR "unexpected consumer output: ${last_output}")
endif()
message(STATUS "${last_output}")
