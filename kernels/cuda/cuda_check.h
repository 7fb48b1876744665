#pragma once
// Turning CUDA and cuBLAS status codes into shoal::Error with the call that failed.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "engine/error.h"

namespace shoal::cuda {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
  }
}

inline void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(std::string("cuBLAS: ") + what + ": " + cublasGetStatusString(status));
  }
}

}  // namespace shoal::cuda

// SHOAL_CUDA_CHECK(cudaMalloc(...)): throws shoal::Error naming the call.
#define SHOAL_CUDA_CHECK(call) ::shoal::cuda::check((call), #call)
