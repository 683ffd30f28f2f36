# Finds mha's dependencies; a missing one stops configuration with the Debian
# package that provides it.

# A macro, not a function: find_package's variables (hwy_VERSION...) must
# reach the caller.
macro(mha_require package debian_package)
  find_package(${package} ${ARGN} QUIET)
  if(NOT ${package}_FOUND)
    message(FATAL_ERROR
      "mha needs ${package}, which was not found. On Debian 12 install it with:\n"
      "  sudo apt-get install ${debian_package}")
  endif()
endmacro()

mha_require(hwy libhwy-dev CONFIG)
mha_require(TBB libtbb-dev CONFIG)
find_package(Threads REQUIRED)

if(MHA_BUILD_TESTS)
  mha_require(GTest libgtest-dev)
endif()
if(MHA_BUILD_BENCHMARKS)
  mha_require(benchmark libbenchmark-dev CONFIG)
endif()
