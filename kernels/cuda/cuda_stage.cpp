#include "kernels/cuda/cuda_stage.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "engine/model/model_weights.h"
#include "kernels/cuda/cuda_check.h"

namespace shoal::cuda {
namespace {

// Batches from this size multiply through cuBLAS (dequantize to f16 + GEMM): below it, reading
// the quantized weights once per token with the mat-vec kernels moves fewer bytes than writing
// and reading an f16 copy of the matrix.
constexpr int64_t kCublasMinBatch = 8;
// Positions per split of the attention kernel: a few blocks per SM for a long decode context.
constexpr int32_t kAttentionChunk = 256;

size_t sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

CudaStage::CudaStage(int device, const runtime::ModelSource& model, const runtime::StageSpec& spec)
    : m_device(device), m_config(*model.config), m_spec(spec) {
  const model::ModelConfig& c = m_config;
  const model::ModelWeights& w = *model.weights;
  if (spec.firstLayer < 0 || spec.lastLayer > c.nLayer || spec.firstLayer > spec.lastLayer) {
    throw Error("CUDA stage: layer range [" + std::to_string(spec.firstLayer) + ", " +
                std::to_string(spec.lastLayer) + ") is outside the model's " +
                std::to_string(c.nLayer) + " layers");
  }
  if (spec.contextLength <= 0 || spec.maxSequences <= 0 || spec.maxBatch <= 0) {
    throw Error("CUDA stage: context length, sequences and batch must be positive");
  }
  SHOAL_CUDA_CHECK(cudaSetDevice(device));
  SHOAL_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
  SHOAL_CUDA_CHECK(cublasCreate(&m_cublas));
  SHOAL_CUDA_CHECK(cublasSetStream(m_cublas, m_stream));

  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    const model::LayerWeights& lw = w.layers[sz(i)];
    for (auto t : {lw.attnNorm, lw.wq, lw.wk, lw.wv, lw.wo, lw.bq, lw.bk, lw.bv, lw.ffnNorm,
                   lw.wGate, lw.wUp, lw.wDown}) {
      m_weights.add(t);
    }
  }
  if (spec.hasEmbedding) m_weights.add(w.tokenEmbd);
  if (spec.hasHead) {
    m_weights.add(w.outputNorm);
    m_weights.add(w.output);
  }
  m_weights.add(w.ropeFreqs);
  m_weights.upload(m_stream);

  int64_t maxMatrix = 0;
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    const model::LayerWeights& lw = w.layers[sz(i)];
    Layer L{m_weights.f32(lw.attnNorm), m_weights.get(lw.wq),  m_weights.get(lw.wk),
            m_weights.get(lw.wv),       m_weights.get(lw.wo),  m_weights.f32(lw.bq),
            m_weights.f32(lw.bk),       m_weights.f32(lw.bv),  m_weights.f32(lw.ffnNorm),
            m_weights.get(lw.wGate),    m_weights.get(lw.wUp), m_weights.get(lw.wDown)};
    for (const DeviceMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wGate, &L.wUp, &L.wDown}) {
      maxMatrix = std::max(maxMatrix, m->rows * m->k);
    }
    m_layers.push_back(L);
  }
  if (spec.hasEmbedding) m_tokenEmbd = m_weights.get(w.tokenEmbd);
  if (spec.hasHead) {
    m_outputNorm = m_weights.f32(w.outputNorm);
    m_output = m_weights.get(w.output);
    maxMatrix = std::max(maxMatrix, m_output.rows * m_output.k);
  }
  m_ropeFreqs = m_weights.f32(w.ropeFreqs);

  m_rope.headDim = c.headDim;
  m_rope.nRot = c.nRot;
  m_rope.neox = c.ropeStyle == model::RopeStyle::Neox;
  m_rope.thetaScale = std::pow(c.ropeFreqBase, -2.0f / static_cast<float>(c.nRot));
  m_rope.freqScale = c.ropeFreqScale;
  m_rope.freqFactors = m_ropeFreqs;
  m_attn.nHead = c.nHead;
  m_attn.nHeadKv = c.nHeadKv;
  m_attn.headDim = c.headDim;
  m_attn.scale = 1.0f / std::sqrt(static_cast<float>(c.headDim));  // llama.cpp's kq_scale
  m_attn.chunk = kAttentionChunk;
  m_attn.splits = (spec.contextLength + kAttentionChunk - 1) / kAttentionChunk;

  auto alloc = [this](size_t bytes) {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (status != cudaSuccess) {
      throw Error("CUDA stage: cannot allocate " + std::to_string(bytes) +
                  " bytes of activations/KV cache: " + cudaGetErrorString(status));
    }
    m_allocations.push_back(p);
    return p;
  };
  const int64_t b = spec.maxBatch, kvDim = c.kvDim(), qDim = c.qDim();
  const int64_t maxK = std::max({static_cast<int64_t>(c.nEmbd), qDim, static_cast<int64_t>(c.nFf)});
  m_kvSlot = static_cast<int64_t>(spec.contextLength) * kvDim;
  const size_t kvHalves = m_layers.size() * sz(spec.maxSequences) * 2 * sz(m_kvSlot);
  m_kv = static_cast<__half*>(alloc(kvHalves * sizeof(__half)));
  SHOAL_CUDA_CHECK(cudaMemsetAsync(m_kv, 0, kvHalves * sizeof(__half), m_stream));
  auto floats = [&](int64_t n) { return static_cast<float*>(alloc(sz(n) * sizeof(float))); };
  m_x = floats(b * c.nEmbd);
  m_norm = floats(b * c.nEmbd);
  m_q = floats(b * qDim);
  m_k = floats(b * kvDim);
  m_v = floats(b * kvDim);
  m_attnOut = floats(b * qDim);
  m_gate = floats(b * c.nFf);
  m_up = floats(b * c.nFf);
  m_tmp = floats(b * std::max(static_cast<int64_t>(c.nEmbd), qDim));
  if (spec.hasHead) m_logits = floats(b * c.nVocab);
  m_partial = floats(b * c.nHead * m_attn.splits * (c.headDim + 2));
  m_xq = static_cast<int8_t*>(alloc(sz(b * maxK)));
  m_xds = static_cast<float2*>(alloc(sz(b * maxK / 32) * sizeof(float2)));
  if (b >= kCublasMinBatch) {
    m_xHalf = static_cast<__half*>(alloc(sz(b * maxK) * sizeof(__half)));
    m_wHalf = static_cast<__half*>(alloc(sz(maxMatrix) * sizeof(__half)));
  }
  m_tokens = static_cast<int32_t*>(alloc(sz(b) * sizeof(int32_t)));
  m_position = static_cast<int32_t*>(alloc(sizeof(int32_t)));

  const int64_t outFloats = std::max(b * c.nEmbd, spec.hasHead ? b * c.nVocab : 0);
  SHOAL_CUDA_CHECK(cudaMallocHost(&m_hostInput, sz(b + 1) * sizeof(int32_t)));
  SHOAL_CUDA_CHECK(cudaMallocHost(&m_hostOut, sz(outFloats) * sizeof(float)));
  m_cached.assign(sz(spec.maxSequences), 0);
  m_decodeGraphs.assign(sz(spec.maxSequences), nullptr);
  SHOAL_CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

CudaStage::~CudaStage() {
  cudaSetDevice(m_device);
  if (m_stream) cudaStreamSynchronize(m_stream);
  for (cudaGraphExec_t g : m_decodeGraphs)
    if (g) cudaGraphExecDestroy(g);
  for (void* p : m_allocations) cudaFree(p);
  if (m_hostInput) cudaFreeHost(m_hostInput);
  if (m_hostOut) cudaFreeHost(m_hostOut);
  if (m_cublas) cublasDestroy(m_cublas);
  if (m_stream) cudaStreamDestroy(m_stream);
}

void CudaStage::checkInput(const runtime::StageInput& in) const {
  if (in.sequence < 0 || in.sequence >= m_spec.maxSequences) {
    throw Error("CUDA stage: sequence " + std::to_string(in.sequence) + " out of range");
  }
  if (in.count <= 0 || in.count > m_spec.maxBatch) {
    throw Error("CUDA stage: batch of " + std::to_string(in.count) + " tokens (max " +
                std::to_string(m_spec.maxBatch) + ")");
  }
  if (in.firstPosition < 0 || in.firstPosition > m_cached[sz(in.sequence)] ||
      in.firstPosition + in.count > m_spec.contextLength) {
    throw Error("CUDA stage: positions [" + std::to_string(in.firstPosition) + ", " +
                std::to_string(in.firstPosition + in.count) + ") do not follow the " +
                std::to_string(m_cached[sz(in.sequence)]) +
                " cached positions within a context of " + std::to_string(m_spec.contextLength));
  }
  if (m_spec.hasEmbedding) {
    if (in.tokens.size() != sz(in.count)) throw Error("CUDA stage: token count mismatch");
    for (int32_t t : in.tokens) {
      if (t < 0 || t >= m_config.nVocab) {
        throw Error("CUDA stage: token id " + std::to_string(t) + " outside the vocabulary");
      }
    }
  } else if (in.hidden.size() != sz(in.count) * sz(m_config.nEmbd)) {
    throw Error("CUDA stage: expected " + std::to_string(in.count) + " x " +
                std::to_string(m_config.nEmbd) + " hidden values, got " +
                std::to_string(in.hidden.size()));
  }
}

__half* CudaStage::keyCache(size_t localLayer, int32_t sequence) const {
  return m_kv + (localLayer * sz(m_spec.maxSequences) + sz(sequence)) * 2 * sz(m_kvSlot);
}

__half* CudaStage::valueCache(size_t localLayer, int32_t sequence) const {
  return keyCache(localLayer, sequence) + m_kvSlot;
}

void CudaStage::forward(const runtime::StageInput& in, runtime::StageOutput& out) {
  checkInput(in);
  SHOAL_CUDA_CHECK(cudaSetDevice(m_device));
  const model::ModelConfig& c = m_config;
  const int64_t n = in.count;

  // Inputs go through pinned memory so the copies are truly asynchronous (and graph-safe).
  m_hostInput[0] = in.firstPosition;
  SHOAL_CUDA_CHECK(
      cudaMemcpyAsync(m_position, m_hostInput, sizeof(int32_t), cudaMemcpyHostToDevice, m_stream));
  if (m_spec.hasEmbedding) {
    std::memcpy(m_hostInput + 1, in.tokens.data(), sz(n) * sizeof(int32_t));
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_tokens, m_hostInput + 1, sz(n) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, m_stream));
  } else {
    std::memcpy(m_hostOut, in.hidden.data(), in.hidden.size() * sizeof(float));
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_x, m_hostOut, in.hidden.size() * sizeof(float),
                                     cudaMemcpyHostToDevice, m_stream));
  }

  if (n == 1) {
    cudaGraphExec_t& exec = m_decodeGraphs[sz(in.sequence)];
    if (!exec) {
      cudaGraph_t graph = nullptr;
      SHOAL_CUDA_CHECK(cudaStreamBeginCapture(m_stream, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue(in.sequence, 1, false);
      } catch (...) {
        cudaStreamEndCapture(m_stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      SHOAL_CUDA_CHECK(cudaStreamEndCapture(m_stream, &graph));
      const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      SHOAL_CUDA_CHECK(status);
    }
    SHOAL_CUDA_CHECK(cudaGraphLaunch(exec, m_stream));
  } else {
    enqueue(in.sequence, n, in.allLogits);
  }

  if (m_spec.hasHead) {
    const int64_t rows = in.allLogits ? n : 1;
    const size_t count = sz(rows) * sz(c.nVocab);
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_hostOut, m_logits, count * sizeof(float),
                                     cudaMemcpyDeviceToHost, m_stream));
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(m_stream));
    out.logits.assign(m_hostOut, m_hostOut + count);
  } else {
    const size_t count = sz(n) * sz(c.nEmbd);
    SHOAL_CUDA_CHECK(
        cudaMemcpyAsync(m_hostOut, m_x, count * sizeof(float), cudaMemcpyDeviceToHost, m_stream));
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(m_stream));
    out.hidden.assign(m_hostOut, m_hostOut + count);
  }
  m_cached[sz(in.sequence)] = in.firstPosition + in.count;
}

void CudaStage::enqueue(int32_t sequence, int64_t count, bool allLogits) {
  const model::ModelConfig& c = m_config;
  if (m_spec.hasEmbedding) {
    gatherRows(m_tokenEmbd.type, m_tokenEmbd.data, m_tokens, count, c.nEmbd, m_tokenEmbd.rowBytes,
               m_x, m_stream);
  }
  for (size_t l = 0; l < m_layers.size(); ++l) runLayer(m_layers[l], l, sequence, count);
  if (m_spec.hasHead) {
    const int64_t first = allLogits ? 0 : count - 1;
    const int64_t rows = count - first;
    rmsNorm(m_x + first * c.nEmbd, m_outputNorm, m_norm, rows, c.nEmbd, c.rmsEps, m_stream);
    matmul(m_output, m_norm, rows, m_logits);
  }
}

// One transformer block, pre-norm, as CpuStage::runLayer:
//   x += Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x))
//   x += Wdown · (silu(Wgate·norm(x)) * Wup·norm(x))
void CudaStage::runLayer(const Layer& L, size_t localLayer, int32_t sequence, int64_t n) {
  const model::ModelConfig& c = m_config;
  const int64_t d = c.nEmbd, kv = c.kvDim(), qd = c.qDim();
  rmsNorm(m_x, L.attnNorm, m_norm, n, d, c.rmsEps, m_stream);
  matmul(L.wq, m_norm, n, m_q);
  matmul(L.wk, m_norm, n, m_k);
  matmul(L.wv, m_norm, n, m_v);
  if (L.bq) addBias(m_q, L.bq, n, qd, m_stream);
  if (L.bk) addBias(m_k, L.bk, n, kv, m_stream);
  if (L.bv) addBias(m_v, L.bv, n, kv, m_stream);
  RopeParams rq = m_rope;
  rq.heads = c.nHead;
  rope(m_q, n, rq, m_position, m_stream);
  RopeParams rk = m_rope;
  rk.heads = c.nHeadKv;
  rope(m_k, n, rk, m_position, m_stream);
  __half* keys = keyCache(localLayer, sequence);
  __half* values = valueCache(localLayer, sequence);
  storeKv(m_k, m_v, keys, values, n, static_cast<int32_t>(kv), m_position, m_stream);
  attention(m_attn, m_q, keys, values, n, m_position, m_partial, m_attnOut, m_stream);
  matmul(L.wo, m_attnOut, n, m_tmp);
  addInPlace(m_x, m_tmp, n * d, m_stream);

  rmsNorm(m_x, L.ffnNorm, m_norm, n, d, c.rmsEps, m_stream);
  matmul(L.wGate, m_norm, n, m_gate);
  matmul(L.wUp, m_norm, n, m_up);
  swiglu(m_gate, m_up, m_gate, n * c.nFf, m_stream);
  matmul(L.wDown, m_gate, n, m_tmp);
  addInPlace(m_x, m_tmp, n * d, m_stream);
}

void CudaStage::matmul(const DeviceMatrix& w, const float* x, int64_t n, float* y) {
  const bool isFloat = w.type == gguf::TensorType::F16 || w.type == gguf::TensorType::F32;
  if (n < kCublasMinBatch || !m_wHalf) {
    if (!isFloat) quantizeActivations(x, n, w.k, m_xq, m_xds, m_stream);
    matvec(w.type, w.data, w.rows, w.k, w.rowBytes, m_xq, m_xds, x, n, y, m_stream);
    return;
  }
  // Y (n x rows, row-major) = X (n x k) · W^T. In cuBLAS's column-major terms: W is k x rows
  // (lda = k), X is k x n (ldb = k), Y is rows x n (ldc = rows): Y = W^T X.
  const __half* wHalf = static_cast<const __half*>(w.data);
  if (w.type != gguf::TensorType::F16) {
    dequantizeToHalf(w.type, w.data, w.rows, w.k, w.rowBytes, m_wHalf, m_stream);
    wHalf = m_wHalf;
  }
  floatToHalf(x, m_xHalf, n * w.k, m_stream);
  const float alpha = 1.0f, beta = 0.0f;
  SHOAL_CUDA_CHECK(cublasGemmEx(m_cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
                                static_cast<int>(n), static_cast<int>(w.k), &alpha, wHalf,
                                CUDA_R_16F, static_cast<int>(w.k), m_xHalf, CUDA_R_16F,
                                static_cast<int>(w.k), &beta, y, CUDA_R_32F,
                                static_cast<int>(w.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaStage::truncate(int32_t sequence, int32_t fromPosition) {
  if (sequence < 0 || sequence >= m_spec.maxSequences) {
    throw Error("CUDA stage: sequence " + std::to_string(sequence) + " out of range");
  }
  m_cached[sz(sequence)] = std::clamp(fromPosition, 0, m_cached[sz(sequence)]);
}

int32_t CudaStage::cachedPositions(int32_t sequence) const {
  if (sequence < 0 || sequence >= m_spec.maxSequences) return 0;
  return m_cached[sz(sequence)];
}

}  // namespace shoal::cuda
