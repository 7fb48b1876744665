// Whether this library's kernels can run on the current device: the fat binary must hold SASS
// for the device's architecture or PTX old enough for the driver to compile. Asked once per
// device when the backend starts, so a GPU the plugin was not built for is reported unavailable
// with the reason instead of failing (cudaErrorNoKernelImageForDevice) at the first forward pass.

#include "kernels/cuda/cuda_kernels.h"

namespace shoal::cuda {
namespace {

__global__ void kernelImageProbe() {}

}  // namespace

cudaError_t probeKernelImage() {
  cudaFuncAttributes attributes{};
  // Looks the kernel up in the module loaded for the current device; no launch.
  return cudaFuncGetAttributes(&attributes, kernelImageProbe);
}

}  // namespace shoal::cuda
