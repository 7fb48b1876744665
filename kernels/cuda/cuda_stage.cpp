#include "kernels/cuda/cuda_stage.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "engine/model/architecture.h"
#include "engine/model/kv_ring.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/top_k_draw.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/gpu_op_gaps.h"

namespace shoal::cuda {
namespace {

using model::TensorRole;

size_t sz(int64_t v) { return static_cast<size_t>(v); }

const model::ModelConfig& configOf(const runtime::ModelSource& model) {
  if (!model.config || !model.weights) throw Error("CUDA stage: no model given");
  // The plugin links nothing of the engine (cuda_plugin_abi.h), so it reaches the architecture
  // through the pointer fromGguf stored, as architectureOf() would, not through the registry.
  if (!model.config->arch) {
    throw Error("CUDA stage: the model config names no architecture (not read by fromGguf?)");
  }
  return *model.config;
}

// The RoPE frequency factors on the host (the RoPE tables are computed there): rope_freqs.weight,
// or LongRoPE's long or short factors for this stage's context length.
const float* hostFreqFactors(const runtime::ModelSource& model, int32_t contextLength) {
  const gguf::TensorInfo* t = model.weights->ropeFactors(*model.config, contextLength);
  if (!t || t->type != gguf::TensorType::F32) return nullptr;
  return reinterpret_cast<const float*>(t->data);
}

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20) + " MiB"; }

// Refuses, before anything large is allocated, a stage that would not fit in the device's free
// memory (within the ledger's limit), with the figures a user needs (a cudaMalloc failure halfway
// through the upload would say only "out of memory").
void checkFits(int device, const CudaStage::Footprint& need, const MemoryLedger* ledger) {
  size_t driverFree = 0, totalBytes = 0;
  SHOAL_CUDA_CHECK(cudaMemGetInfo(&driverFree, &totalBytes));
  const uint64_t freeBytes = ledger ? ledger->available(driverFree) : driverFree;
  if (need.total() > freeBytes) {
    throw Error("CUDA stage on cuda" + std::to_string(device) + ": needs about " +
                mib(need.total()) + " (weights " + mib(need.weights) + ", KV cache " +
                mib(need.kvCache) + ", working buffers " + mib(need.working) + ", reserve " +
                mib(CudaStage::Footprint::kReserve) + ") but only " + mib(freeBytes) + " of " +
                mib(totalBytes) + " is free" +
                (ledger && ledger->limit > 0 && freeBytes < driverFree
                     ? " within the memory limit of " + mib(ledger->limit)
                     : std::string()) +
                ": give this GPU fewer layers or use a shorter context");
  }
}

}  // namespace

CudaStage::Footprint CudaStage::footprint(const runtime::ModelSource& model,
                                          const runtime::StageSpec& spec) {
  const model::ModelConfig& c = configOf(model);
  const model::ModelWeights& w = *model.weights;
  Footprint f;
  // The KV cache: per layer, the context or a sliding window's ring (kv_ring.h), as wide as the
  // layer's keys; and the MoE scratch's widest layer. Ops without kernels are refused here, so
  // before anything is allocated.
  uint64_t kvPositions = 0;
  int64_t moeFloats = 0, moeEntries = 0;
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    const model::LayerProgram program = c.arch->layerProgram(c, i);
    for (const model::Op& op : program.ops) {
      if (const char* missing = kernels::gpuOpGap(op, kCudaOps)) {
        throw Error("CUDA stage: layer " + std::to_string(i) + " has " + missing +
                    ", which has no CUDA kernels yet (the CPU backend runs it)");
      }
      if (op.kind == model::OpKind::MoeFfn) {
        // An expert product's grid has a row per (token, k) entry: CUDA's grid y limit.
        if (int64_t{spec.maxBatch} * op.moe.used > 65535) {
          throw Error("CUDA stage: batches of " + std::to_string(spec.maxBatch) + " tokens with " +
                      std::to_string(op.moe.used) +
                      " experts each exceed 65535 (token, expert) entries: use a smaller batch");
        }
        const int64_t ff = c.nFfExp > 0 ? c.nFfExp : c.nFf;
        moeEntries = std::max<int64_t>(moeEntries, op.moe.used);
        moeFloats =
            std::max<int64_t>(moeFloats, op.moe.experts + 2 + op.moe.used * (3 * ff + c.nEmbd + 2));
      }
    }
    const int32_t window = model::attendWindow(program);
    const int32_t kvDim = program.kvDim > 0 ? program.kvDim : c.kvDim();
    kvPositions += static_cast<uint64_t>(model::kvRingPeriodFor(window, spec.contextLength) > 0
                                             ? model::kvRingPositions(window)
                                             : spec.contextLength) *
                   static_cast<uint64_t>(kvDim);
  }
  f.kvCache = static_cast<uint64_t>(spec.maxSequences) * 2 * kvPositions * sizeof(__half);

  // The weights: what the architecture's tensor table assigns to the stage, each tensor once
  // (a tied output is token_embd again), at DeviceWeights' 256-byte granularity.
  std::set<const gguf::TensorInfo*> seen;
  int64_t largestRow = 0;  // elements: a tile of the cuBLAS path's f16 copy holds at least one
  forEachStageTensor(c, w, spec.firstLayer, spec.lastLayer, spec.hasEmbedding, spec.hasHead,
                     [&](const gguf::TensorInfo* t) {
                       if (!t || !seen.insert(t).second) return;
                       f.weights += (t->nbytes + 255) / 256 * 256;
                       largestRow = std::max(largestRow, t->dims.front());
                     });

  const int64_t b = spec.maxBatch;
  const int64_t widest = std::max<int64_t>({c.nEmbd, c.nFf, c.qDim()});
  const int64_t splits = (spec.contextLength + kAttentionChunk - 1) / kAttentionChunk;
  const int64_t partials = std::max(splits, b) * c.nHead * (c.headDim + 2);  // (cuda_stage.h)
  const int64_t halfTile = std::max(kHalfTileElements, largestRow);
  f.working = sizeof(float) * sz(b * (static_cast<int64_t>(model::kBufferCount) * widest +
                                      (spec.hasHead ? c.nVocab : 0)) +
                                 partials) +
              sz(b * widest) * 4 +  // int8 activations and their scales
              (b >= kCublasMinBatch ? sizeof(__half) * sz(b * widest + halfTile) : 0) +
              sizeof(float) * sz(b * moeFloats) + sz(b * moeEntries) * sizeof(int32_t);
  if (spec.hasHead) {  // top-k sampling: the selection's result and its intermediate levels
    f.working +=
        sz(kTopKRows * kMaxDeviceTopK) * 8 +
        (c.nVocab > kTopKChunk ? topKScratchBytes(kTopKRows, c.nVocab, kMaxDeviceTopK) : 0);
  }
  return f;
}

CudaStage::CudaStage(int device, const runtime::ModelSource& model, const runtime::StageSpec& spec,
                     std::shared_ptr<MemoryLedger> ledger)
    : m_device(device),
      m_ledger(std::move(ledger)),
      m_config(configOf(model)),
      m_spec(spec),
      m_book("CUDA stage", spec, m_config.nLayer, m_config.nVocab, m_config.nEmbd),
      m_ropeTables(spec.contextLength, hostFreqFactors(model, spec.contextLength)) {
  const model::ModelConfig& c = m_config;
  const model::ModelWeights& w = *model.weights;
  const char* unfused = std::getenv("SHOAL_CUDA_UNFUSED");
  m_fused = !(unfused && std::string_view(unfused) == "1");
  try {
    SHOAL_CUDA_CHECK(cudaSetDevice(device));
    SHOAL_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    SHOAL_CUDA_CHECK(cublasCreate(&m_cublas));
    SHOAL_CUDA_CHECK(cublasSetStream(m_cublas, m_stream));

    // Refused before any weight is uploaded (resolveLayers says the same per op).
    if (const char* missing = spec.hasHead ? kernels::gpuHeadGap(c, kCudaOps) : nullptr) {
      throw Error(std::string("CUDA stage: the model's head has ") + missing +
                  ", which has no CUDA kernels yet (the CPU backend runs it)");
    }
    const Footprint need = footprint(model, spec);  // also refuses ops it has no kernels for
    forEachStageTensor(c, w, spec.firstLayer, spec.lastLayer, spec.hasEmbedding, spec.hasHead,
                       [this](const gguf::TensorInfo* t) { m_weights.add(t); });
    checkFits(device, need, m_ledger.get());
    // Held from here (before the upload), so that a stage built beside this one sees it taken.
    if (m_ledger) {
      m_held = need.total();
      m_ledger->held += m_held;
    }
    m_weights.upload(m_stream);
    m_layers = resolveLayers(c, w, m_weights, m_ropeTables, spec.firstLayer, spec.lastLayer);
    for (CudaLayer& layer : m_layers) {
      // A sliding-window layer keeps a ring of its last positions where that is smaller than
      // the context; the book refuses batches the ring cannot serve.
      if (model::kvRingPeriodFor(layer.window, spec.contextLength) > 0) {
        layer.ring = model::kvRingPositions(layer.window);
        m_book.keepRing(layer.ring, layer.window);
        m_rings = true;
      }
    }

    if (spec.hasEmbedding) {
      m_tokenEmbd = m_weights.get(w[TensorRole::TokenEmbd]);
      if (m_tokenEmbd.k != c.nEmbd || m_tokenEmbd.rows < c.nVocab) {
        throw Error("CUDA stage: the token embedding is missing or not " +
                    std::to_string(c.nVocab) + " rows of " + std::to_string(c.nEmbd));
      }
    }
    if (spec.hasHead) {
      m_output = m_weights.get(w[TensorRole::Output]);
      m_outputNorm = m_weights.f32(w[TensorRole::OutputNorm]);
      if (!m_outputNorm || m_output.k != c.nEmbd || m_output.rows != c.nVocab) {
        throw Error("CUDA stage: the output norm or the output projection (" +
                    std::to_string(c.nVocab) + " rows of " + std::to_string(c.nEmbd) +
                    ") is missing or misshapen");
      }
    }
    allocate();
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(m_stream));
  } catch (...) {
    release();
    throw;
  }
}

CudaStage::~CudaStage() { release(); }

void CudaStage::allocate() {
  const model::ModelConfig& c = m_config;
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
  auto floats = [&](int64_t n) { return static_cast<float*>(alloc(sz(n) * sizeof(float))); };

  // Sizes follow the resolved programs: the widest keys of a layer, the largest matrix (the
  // cuBLAS path's f16 copy) and the longest row a matrix reads (the int8 activations).
  int64_t kvHalves = 0, maxMatrix = 0, maxK = c.nEmbd;
  int32_t maxKvDim = 0;
  // The widest mixture of experts: router logits per token, and entries x width per token.
  int64_t moeExperts = 0, moeEntries = 0, moeWidth = 0, moeOut = 0;
  for (const CudaLayer& layer : m_layers) {
    m_kvBase.push_back(kvHalves);
    kvHalves += int64_t{m_spec.maxSequences} * 2 * kvPositions(layer) * layer.kvDim;
    maxKvDim = std::max(maxKvDim, layer.kvDim);
    for (const CudaOp& op : layer.ops) {
      for (const DeviceMatrix& m : op.matrices) {
        maxMatrix = std::max(maxMatrix, m.rows * m.k);
        maxK = std::max(maxK, m.k);
      }
      if (op.op.kind == model::OpKind::MoeFfn) {
        moeExperts = std::max<int64_t>(moeExperts, op.op.moe.experts);
        moeEntries = std::max<int64_t>(moeEntries, op.op.moe.used);
        moeWidth = std::max(moeWidth, op.experts.width);
        moeOut = std::max(moeOut, op.experts.matrices[2].rows / op.op.moe.experts);
      }
    }
  }
  maxMatrix = std::max(maxMatrix, m_output.rows * m_output.k);
  m_kv = static_cast<__half*>(alloc(sz(kvHalves) * sizeof(__half)));
  SHOAL_CUDA_CHECK(cudaMemsetAsync(m_kv, 0, sz(kvHalves) * sizeof(__half), m_stream));

  const int64_t b = m_spec.maxBatch;
  for (size_t i = 0; i < model::kBufferCount; ++i) {
    const auto buffer = static_cast<model::Buffer>(i);
    int64_t width = bufferWidth(buffer, c, maxKvDim);
    if (buffer == model::Buffer::Tmp) width = std::max<int64_t>(width, c.qDim());
    m_buffers[i] = floats(b * width);
  }
  if (m_spec.hasHead) m_logits = floats(b * c.nVocab);
  m_attentionSplits = (m_spec.contextLength + kAttentionChunk - 1) / kAttentionChunk;
  m_partial = floats(std::max<int64_t>(m_attentionSplits, b) * c.nHead * (c.headDim + 2));
  m_attentionTickets = static_cast<unsigned*>(alloc(sz(b * c.nHead) * sizeof(unsigned)));
  SHOAL_CUDA_CHECK(
      cudaMemsetAsync(m_attentionTickets, 0, sz(b * c.nHead) * sizeof(unsigned), m_stream));
  m_xq = static_cast<int8_t*>(alloc(sz(b * maxK)));
  m_xds = static_cast<float2*>(alloc(sz(b * maxK / 32) * sizeof(float2)));
  if (b >= kCublasMinBatch) {
    m_xHalf = static_cast<__half*>(alloc(sz(b * maxK) * sizeof(__half)));
    const int64_t tile = std::min(maxMatrix, std::max(kHalfTileElements, maxK));
    m_wHalf = static_cast<__half*>(alloc(sz(tile) * sizeof(__half)));
  }
  if (moeExperts > 0) {
    const int64_t entries = b * moeEntries;
    m_moe.logits = floats(b * moeExperts);
    m_moe.ids = static_cast<int32_t*>(alloc(sz(entries) * sizeof(int32_t)));
    m_moe.weights = floats(entries);
    m_moe.gate = floats(entries * moeWidth);
    m_moe.up = floats(entries * moeWidth);
    m_moe.down = floats(entries * moeOut);
    m_moe.xq = static_cast<int8_t*>(alloc(sz(entries * moeWidth)));
    m_moe.xds = static_cast<float2*>(alloc(sz(entries * moeWidth / 32) * sizeof(float2)));
  }
  m_tokens = static_cast<int32_t*>(alloc(sz(b) * sizeof(int32_t)));
  if (m_spec.hasHead) {
    m_sampled = static_cast<int32_t*>(alloc(sz(b) * sizeof(int32_t)));
    const int64_t top = kTopKRows * kMaxDeviceTopK;
    m_topValues = floats(top);
    m_topIds = static_cast<int32_t*>(alloc(sz(top) * sizeof(int32_t)));
    if (c.nVocab > kTopKChunk) {  // intermediate levels (topKScratchBytes)
      const int64_t level = top * ((c.nVocab + kTopKChunk - 1) / kTopKChunk);
      for (int i = 0; i < 2; ++i) {
        m_topScratch.values[i] = floats(level);
        m_topScratch.ids[i] = static_cast<int32_t*>(alloc(sz(level) * sizeof(int32_t)));
      }
    }
  }
  m_position = static_cast<int32_t*>(alloc(sizeof(int32_t)));

  const int64_t outFloats = std::max(b * c.nEmbd, m_spec.hasHead ? b * c.nVocab : 0);
  SHOAL_CUDA_CHECK(cudaMallocHost(&m_hostInput, sz(b + 1) * sizeof(int32_t)));
  SHOAL_CUDA_CHECK(cudaMallocHost(&m_hostOut, sz(outFloats) * sizeof(float)));
  SHOAL_CUDA_CHECK(cudaMallocHost(&m_hostSampled, sz(b) * sizeof(int32_t)));
  if (m_spec.hasHead) {
    SHOAL_CUDA_CHECK(
        cudaMallocHost(&m_hostTopValues, sz(kTopKRows * kMaxDeviceTopK) * sizeof(float)));
    SHOAL_CUDA_CHECK(
        cudaMallocHost(&m_hostTopIds, sz(kTopKRows * kMaxDeviceTopK) * sizeof(int32_t)));
  }
  m_decodeGraphs.assign(sz(m_spec.maxSequences) * 2, nullptr);
}

void CudaStage::release() noexcept {
  cudaSetDevice(m_device);
  if (m_stream) cudaStreamSynchronize(m_stream);
  for (cudaGraphExec_t g : m_decodeGraphs)
    if (g) cudaGraphExecDestroy(g);
  m_decodeGraphs.clear();
  for (void* p : m_allocations) cudaFree(p);
  m_allocations.clear();
  if (m_hostInput) cudaFreeHost(m_hostInput);
  if (m_hostOut) cudaFreeHost(m_hostOut);
  if (m_hostSampled) cudaFreeHost(m_hostSampled);
  if (m_hostTopValues) cudaFreeHost(m_hostTopValues);
  if (m_hostTopIds) cudaFreeHost(m_hostTopIds);
  m_hostTopValues = nullptr;
  m_hostTopIds = nullptr;
  m_hostInput = nullptr;
  m_hostOut = nullptr;
  m_hostSampled = nullptr;
  if (m_cublas) cublasDestroy(m_cublas);
  if (m_stream) cudaStreamDestroy(m_stream);
  m_cublas = nullptr;
  m_stream = nullptr;
  if (m_ledger) m_ledger->held -= m_held;
  m_held = 0;
}

void CudaStage::run(const runtime::Batch& batch, runtime::StageOutput& out) {
  m_book.check(batch);
  SHOAL_CUDA_CHECK(cudaSetDevice(m_device));
  out.hidden.clear();
  out.logits.clear();
  out.tokens.clear();
  // Sampling on the device: greedy requests by argmax (a token reads back 4 bytes), top-k ones
  // (k <= kMaxDeviceTopK, at most kTopKRows logits rows) by topK and a draw among the k on the
  // host (k x 8 bytes). Other requests get logits back (the host samples them).
  const runtime::SampleRequest* sample = m_spec.hasHead ? batch.sample : nullptr;
  int32_t select = 0;
  if (sample && sample->temperature <= 0) {
    select = 1;
  } else if (sample && sample->topK > 0 && sample->topK <= kMaxDeviceTopK &&
             runtime::SequenceBook::logitRows(batch) <= kTopKRows) {
    select = sample->topK;
  }
  // Segment by segment: each sequence's rows go through every layer on their own. Running the
  // rows of several sequences in one pass (one matmul for all of them) is the concurrent
  // batching of issue 18.
  // A stage with a ring takes long segments in chunks, so that a chunk's new positions never
  // overwrite the window one of its rows reads (kv_ring.h); only the last chunk keeps a
  // segment's last row's logits.
  const int32_t chunk = m_rings ? model::kKvRingWriteChunk : std::numeric_limits<int32_t>::max();
  int32_t row = 0;
  for (const runtime::Segment& segment : batch.segments) {
    for (int32_t done = 0; done < segment.count;) {
      runtime::Segment part = segment;
      part.firstPosition += done;
      part.count = std::min(chunk, segment.count - done);
      if (segment.logits == runtime::LogitRows::Last && done + part.count < segment.count) {
        part.logits = runtime::LogitRows::None;
      }
      runSegment(batch, part, row + done, select, out);
      done += part.count;
    }
    row += segment.count;
  }
  m_book.commit(batch);
}

void CudaStage::runSegment(const runtime::Batch& batch, const runtime::Segment& s, int32_t firstRow,
                           int32_t select, runtime::StageOutput& out) {
  const model::ModelConfig& c = m_config;
  const int64_t n = s.count;

  // Inputs go through pinned memory so the copies are truly asynchronous (and graph-safe); the
  // stream is synchronized at the end of every segment, so the staging is free again here.
  m_hostInput[0] = s.firstPosition;
  SHOAL_CUDA_CHECK(
      cudaMemcpyAsync(m_position, m_hostInput, sizeof(int32_t), cudaMemcpyHostToDevice, m_stream));
  if (m_spec.hasEmbedding) {
    std::memcpy(m_hostInput + 1, batch.tokens.data() + firstRow, sz(n) * sizeof(int32_t));
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_tokens, m_hostInput + 1, sz(n) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, m_stream));
  } else {
    const size_t count = sz(n) * sz(c.nEmbd);
    std::memcpy(m_hostOut, batch.hidden.data() + sz(firstRow) * sz(c.nEmbd), count * sizeof(float));
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_buffers[size_t(model::Buffer::X)], m_hostOut,
                                     count * sizeof(float), cudaMemcpyHostToDevice, m_stream));
  }

  // Only the head stage produces logits; the others return every row's hidden state.
  const runtime::LogitRows logits = m_spec.hasHead ? s.logits : runtime::LogitRows::None;
  if (n == 1) {
    cudaGraphExec_t& exec =
        m_decodeGraphs[sz(s.sequence) * 2 + (logits == runtime::LogitRows::None ? 0 : 1)];
    if (!exec) {
      cudaGraph_t graph = nullptr;
      SHOAL_CUDA_CHECK(cudaStreamBeginCapture(m_stream, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue(s.sequence, 1, logits);
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
    enqueue(s.sequence, n, logits);
  }

  if (m_spec.hasHead) {
    const int64_t rows = logits == runtime::LogitRows::All    ? n
                         : logits == runtime::LogitRows::Last ? 1
                                                              : 0;
    if (select > 1) {
      topK(m_logits, rows, c.nVocab, select, m_topScratch, m_topValues, m_topIds, m_stream);
      const size_t entries = sz(rows) * sz(select);
      if (entries > 0) {
        SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_hostTopValues, m_topValues, entries * sizeof(float),
                                         cudaMemcpyDeviceToHost, m_stream));
        SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_hostTopIds, m_topIds, entries * sizeof(int32_t),
                                         cudaMemcpyDeviceToHost, m_stream));
      }
      SHOAL_CUDA_CHECK(cudaStreamSynchronize(m_stream));
      const size_t k = std::min(sz(select), sz(c.nVocab));
      for (int64_t r = 0; r < rows; ++r) {
        out.tokens.push_back(runtime::drawAmongTopK(
            *batch.sample, std::span(m_hostTopValues + sz(r) * sz(select), k),
            std::span(m_hostTopIds + sz(r) * sz(select), k)));
      }
      return;
    }
    if (select == 1) {
      argmax(m_logits, rows, c.nVocab, m_sampled, m_stream);
      if (rows > 0) {
        SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_hostSampled, m_sampled, sz(rows) * sizeof(int32_t),
                                         cudaMemcpyDeviceToHost, m_stream));
      }
      SHOAL_CUDA_CHECK(cudaStreamSynchronize(m_stream));
      out.tokens.insert(out.tokens.end(), m_hostSampled, m_hostSampled + rows);
      return;
    }
    const size_t count = sz(rows) * sz(c.nVocab);
    if (count > 0) {
      SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_hostOut, m_logits, count * sizeof(float),
                                       cudaMemcpyDeviceToHost, m_stream));
    }
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(m_stream));
    out.logits.insert(out.logits.end(), m_hostOut, m_hostOut + count);
  } else {
    const size_t count = sz(n) * sz(c.nEmbd);
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_hostOut, m_buffers[size_t(model::Buffer::X)],
                                     count * sizeof(float), cudaMemcpyDeviceToHost, m_stream));
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(m_stream));
    out.hidden.insert(out.hidden.end(), m_hostOut, m_hostOut + count);
  }
}

}  // namespace shoal::cuda
