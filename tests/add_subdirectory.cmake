# Configures tests/subproject (which says add_subdirectory(mha)), checks that
# only the library is built by default (no tests, benchmarks or examples),
# then builds and runs its consumer.
file(REMOVE_RECURSE "${WORK_DIR}")
include(${CMAKE_CURRENT_LIST_DIR}/run_checked.cmake)

run(${CMAKE_COMMAND} -S "${SUBPROJECT_DIR}" -B "${WORK_DIR}"
    -DMHA_SOURCE_DIR=${MHA_SOURCE_DIR} ${TOOLCHAIN}
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK_DIR}" --target help)
foreach(unwanted mha_tests mha_benchmarks seed_demo)
  if(last_output MATCHES "${unwanted}")
    message(FATAL_ERROR "add_subdirectory(mha) defines ${unwanted} by default")
  endif()
endforeach()
run(${CMAKE_COMMAND} --build "${WORK_DIR}" -j2)
expect_consumer_runs("${WORK_DIR}/consumer")
