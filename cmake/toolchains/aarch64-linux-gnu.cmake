# Cross-compiles mha for 64-bit Arm Linux with Debian's g++-aarch64-linux-gnu,
# finding the arm64 builds of Highway, oneTBB and GoogleTest installed through
# multiarch (libhwy-dev:arm64 ...). Tests and examples run under qemu-aarch64
# (CMAKE_CROSSCOMPILING_EMULATOR), so ctest works as on the host;
# scripts/run-tests-arm.sh sets the CPU it emulates.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Only the arm64 libraries and headers: never the host's x86 ones.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# The arm64 loader and libraries are libc6:arm64's, where multiarch puts them. The emulated CPU
# comes from QEMU_CPU in the environment (qemu-aarch64 reads it), default max.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
