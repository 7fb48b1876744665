// The two exported entry points of libshoal-cuda.so (see cuda_plugin_abi.h). Everything else in
// the plugin is hidden (-fvisibility=hidden).

#include <new>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_plugin_abi.h"

extern "C" __attribute__((visibility("default"))) int shoal_cuda_plugin_abi() {
  return shoal::cuda::kShoalCudaPluginAbi;
}

extern "C" __attribute__((visibility("default"))) shoal::runtime::Backend*
shoal_cuda_create_backend(int abiVersion, uint64_t memoryLimit) {
  if (abiVersion != shoal::cuda::kShoalCudaPluginAbi) return nullptr;
  try {
    return new shoal::cuda::CudaBackend(memoryLimit);
  } catch (...) {
    // Nothing may cross the C boundary as an exception; the loader reports the refusal.
    return nullptr;
  }
}
