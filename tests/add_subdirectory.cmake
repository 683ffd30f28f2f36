# Configures tests/subproject (which says add_subdirectory(mha)), checks that
# only the library is built by default (no tests, benchmarks or examples),
# then builds and runs its consumer.
file(REMOVE_RECURSE "${WORK_DIR}")
include(${CMAKE_CURRENT_LIST_DIR}/run_checked.cmake)

# Only the portable fallback and the static target (NEON on aarch64) are
# compiled, unoptimized (build type None: no -O flag): this test is about
# how the project embeds, and the kernels of every target are compiled,
# optimized, and tested by the main build. All of them took 74 s of the x86
# suite's 85 here, and 100 s under the Arm emulator; the fallback alone
# optimized took 43 s on a Zen 1, and 21 s unoptimized.
run(${CMAKE_COMMAND} -S "${SUBPROJECT_DIR}" -B "${WORK_DIR}"
    -DMHA_SOURCE_DIR=${MHA_SOURCE_DIR} ${TOOLCHAIN}
    -DCMAKE_BUILD_TYPE=None
    -DMHA_OMIT_TARGETS=AVX3_DL,AVX3,AVX2,SSE4,SSSE3,SVE2,SVE2_128,SVE,SVE_256)
run(${CMAKE_COMMAND} --build "${WORK_DIR}" --target help)
foreach(unwanted mha_tests mha_benchmarks seed_demo)
  if(last_output MATCHES "${unwanted}")
    message(FATAL_ERROR "add_subdirectory(mha) defines ${unwanted} by default")
  endif()
endforeach()
run(${CMAKE_COMMAND} --build "${WORK_DIR}" -j2)
expect_consumer_runs("${WORK_DIR}/consumer")
