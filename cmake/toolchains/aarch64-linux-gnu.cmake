# Cross-compiling for 64-bit ARM Linux (Raspberry Pi 5, Jetson, ARM servers) with Debian's
# cross toolchain (g++-aarch64-linux-gnu). The binaries run here under qemu-user
# (qemu-aarch64 -L /usr/aarch64-linux-gnu), which is how scripts/test checks the NEON kernels.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Libraries come from the cross sysroot only; programs (glslc, ccache) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# Header-only packages (CLI11, nlohmann/json) are architecture-independent: their CMake
# configs are found in the host's /usr/share/cmake.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# try_run and tests run through the emulator.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
