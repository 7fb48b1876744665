#pragma once
// The boundary between Shoal and the CUDA backend plugin (libshoal-cuda.so), which Shoal loads
// with dlopen() at run time so that the app starts on machines without an NVIDIA driver.
//
// The plugin exports two C functions:
//   int shoal_cuda_plugin_abi(void);
//       The kShoalCudaPluginAbi the plugin was built with. The loader compares it with its own
//       before calling anything else.
//   shoal::runtime::Backend* shoal_cuda_create_backend(int abiVersion, uint64_t memoryLimit);
//       A new backend (owned by the caller, deleted through the virtual destructor), or nullptr
//       when abiVersion differs from the plugin's. memoryLimit: the most device memory (bytes)
//       the stages of each device may hold (--gpu-memory); 0: the driver's free memory alone. Never
//       throws: a machine without a driver or device still gets a backend whose availability()
//       gives the reason.
//
// C++ objects (Backend, Stage, std::string, std::vector) cross the boundary, so the plugin and
// the host must be built from the same sources with the same compiler and standard library (they
// are: one CMake build). Bump kShoalCudaPluginAbi whenever engine/runtime/backend.h, stage.h or
// the model structs they reference change layout (ModelConfig, ModelWeights, Architecture,
// LayerProgram: the plugin calls the architecture's layerProgram through ModelConfig::arch).

#include <cstdint>

namespace shoal::runtime {
class Backend;
}

namespace shoal::cuda {

// 2: batches of segments, layer programs; 3: the memory limit at creation.
inline constexpr int kShoalCudaPluginAbi = 3;

inline constexpr const char* kPluginFileName = "libshoal-cuda.so";
inline constexpr const char* kAbiSymbol = "shoal_cuda_plugin_abi";
inline constexpr const char* kCreateSymbol = "shoal_cuda_create_backend";

using PluginAbiFn = int (*)();
using CreateBackendFn = runtime::Backend* (*)(int abiVersion, uint64_t memoryLimit);

}  // namespace shoal::cuda
