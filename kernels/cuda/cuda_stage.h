#pragma once
// A stage that runs its layers on one CUDA device: the layer program of kernels/cpu/cpu_stage.cpp
// (llama/qwen2: RMSNorm, RoPE normal/neox with frequency factors, GQA attention over an f16 KV
// cache, SwiGLU, optional tied output) with the kernels of cuda_kernels.h.
//
// Decode (one token) runs as a CUDA graph captured on the first decode of each sequence and
// replayed for every later token: the kernels read the position from device memory, so the
// graph never changes. Batches of 8 or more tokens multiply through cuBLAS (weights dequantized
// to f16, f32 accumulation); smaller ones through the quantized mat-vec kernels.

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <vector>

#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/stage.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_weights.h"

namespace shoal::cuda {

class CudaStage final : public runtime::Stage {
 public:
  CudaStage(int device, const runtime::ModelSource& model, const runtime::StageSpec& spec);
  ~CudaStage() override;

  const runtime::StageSpec& spec() const override { return m_spec; }
  void forward(const runtime::StageInput& input, runtime::StageOutput& output) override;
  void truncate(int32_t sequence, int32_t fromPosition) override;
  int32_t cachedPositions(int32_t sequence) const override;

 private:
  struct Layer {
    const float* attnNorm;
    DeviceMatrix wq, wk, wv, wo;
    const float* bq;
    const float* bk;
    const float* bv;
    const float* ffnNorm;
    DeviceMatrix wGate, wUp, wDown;
  };

  void checkInput(const runtime::StageInput& input) const;
  // The whole program for `count` tokens of `sequence`, inputs already on the device
  // (m_tokens or m_x, m_position), result in m_x or m_logits. Only enqueues work.
  void enqueue(int32_t sequence, int64_t count, bool allLogits);
  void runLayer(const Layer& layer, size_t localLayer, int32_t sequence, int64_t count);
  void matmul(const DeviceMatrix& w, const float* x, int64_t count, float* y);
  __half* keyCache(size_t localLayer, int32_t sequence) const;
  __half* valueCache(size_t localLayer, int32_t sequence) const;

  int m_device = 0;
  model::ModelConfig m_config;
  runtime::StageSpec m_spec;
  cudaStream_t m_stream = nullptr;
  cublasHandle_t m_cublas = nullptr;
  DeviceWeights m_weights;
  std::vector<Layer> m_layers;
  DeviceMatrix m_tokenEmbd, m_output;
  const float* m_outputNorm = nullptr;
  const float* m_ropeFreqs = nullptr;
  RopeParams m_rope;
  AttentionParams m_attn;

  // Device memory, allocated once: KV cache (per local layer and sequence, contextLength x kvDim
  // f16, keys and values) and the activations of a batch of up to maxBatch tokens.
  std::vector<void*> m_allocations;
  __half* m_kv = nullptr;
  int64_t m_kvSlot = 0;  // halves per (layer, sequence) cache of keys or values
  float *m_x = nullptr, *m_norm = nullptr, *m_q = nullptr, *m_k = nullptr, *m_v = nullptr,
        *m_attnOut = nullptr, *m_gate = nullptr, *m_up = nullptr, *m_tmp = nullptr,
        *m_logits = nullptr, *m_partial = nullptr;
  int8_t* m_xq = nullptr;
  float2* m_xds = nullptr;
  __half* m_xHalf = nullptr;
  __half* m_wHalf = nullptr;  // one dequantized weight matrix (cuBLAS path)
  int32_t* m_tokens = nullptr;
  int32_t* m_position = nullptr;

  // Pinned host staging: inputs (tokens, position) and the outputs that leave the device.
  int32_t* m_hostInput = nullptr;  // [0] position, [1..] tokens
  float* m_hostOut = nullptr;

  std::vector<int32_t> m_cached;
  std::vector<cudaGraphExec_t> m_decodeGraphs;  // per sequence, captured on first decode
};

}  // namespace shoal::cuda
