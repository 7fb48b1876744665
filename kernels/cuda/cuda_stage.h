#pragma once
// A stage that runs its layers on one CUDA device. It runs the architecture's layer program
// (engine/model/layer_program.h, resolved once by cuda_program.h) as a loop over its ops, one
// small function per op kind, with the kernels of cuda_kernels.h: RMSNorm, projections (row
// ranges of a fused matrix too), biases, per-head norms, RoPE from precomputed angle tables,
// attention over an f16 KV cache (sliding windows over a ring, soft-capping, sinks), the gated
// FFN (SwiGLU, GeGLU, the clamped SwiGLU), mixtures of experts, scaling, residual adds; the
// embedding before the first layer and the final norm + output head (soft-capped where the model
// says) after the last.
//
// Decode (a one-row segment) runs as a CUDA graph recorded by running that same op loop under
// stream capture on the first decode of each sequence, and replayed for every later token: the
// kernels read the position from device memory, so the graph never changes. Segments of 8 or
// more rows multiply through cuBLAS (weights dequantized to f16, f32 accumulation); smaller ones
// through the quantized mat-vec kernels.

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <span>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/stage_sequences.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_memory_ledger.h"
#include "kernels/cuda/cuda_program.h"
#include "kernels/cuda/cuda_rope_tables.h"
#include "kernels/cuda/cuda_weights.h"

namespace shoal::cuda {

class CudaStage final : public runtime::LocalStage {
 public:
  // ledger: the device's (cuda_memory_ledger.h); the stage fits within what it allows and holds
  // its footprint there until released. Null: the driver's free memory alone (tests).
  CudaStage(int device, const runtime::ModelSource& model, const runtime::StageSpec& spec,
            std::shared_ptr<MemoryLedger> ledger = nullptr);
  ~CudaStage() override;
  CudaStage(const CudaStage&) = delete;
  CudaStage& operator=(const CudaStage&) = delete;

  // What a stage of this spec allocates on its device, in bytes. The working-buffer figure is
  // an upper bound of what allocate() takes; kReserve covers cuBLAS's workspace and the decode
  // graphs. Throws shoal::Error for a layer op without CUDA kernels. Host arithmetic only: the
  // backend answers stageDeviceBytes with it (the memory fit splits a model that does not fit).
  struct Footprint {
    static constexpr uint64_t kReserve = uint64_t{256} << 20;
    uint64_t weights = 0, kvCache = 0, working = 0;
    uint64_t total() const { return weights + kvCache + working + kReserve; }
  };
  static Footprint footprint(const runtime::ModelSource& model, const runtime::StageSpec& spec);

  const runtime::StageSpec& spec() const override { return m_spec; }
  int32_t truncate(int32_t sequence, int32_t fromPosition) override {
    return m_book.truncate(sequence, fromPosition);
  }
  int32_t cachedPositions(int32_t sequence) const override { return m_book.cached(sequence); }

 protected:
  // Checks the batch, runs it segment by segment, returns hidden states or logits. A greedy
  // SampleRequest (temperature <= 0) is served on the device: each logits row's argmax comes
  // back (4 bytes a row) as StageOutput::tokens; other requests get logits (the host samples).
  void run(const runtime::Batch& batch, runtime::StageOutput& output) override;

 private:
  // Segments from this size multiply through cuBLAS (dequantize to f16 + GEMM): below it,
  // reading the quantized weights once per row with the mat-vec kernels moves fewer bytes than
  // writing and reading an f16 copy of the matrix.
  static constexpr int64_t kCublasMinBatch = 8;
  // Logits rows of one batch that top-k sampling serves on the device (a decoded token, a few
  // verified ones); a batch with more gets logits back and the host samples.
  static constexpr int64_t kTopKRows = 16;
  // Positions per split of the attention kernel for a one-row segment (decode): a few blocks per
  // SM for a long context. A segment of several rows already gives a block per (row, head) and
  // runs one split over the whole context, so its partials take rows x heads, not x splits too
  // (at 32k positions, 512 rows and 32 heads of 128 that would be 1.1 GB).
  static constexpr int32_t kAttentionChunk = 256;
  // The cuBLAS path dequantizes a matrix to f16 in tiles of rows of at most this many elements
  // (32 MiB), one GEMM per tile, so its scratch does not grow with the largest matrix (the
  // output matrix of a 128k vocabulary would take 1 GiB).
  static constexpr int64_t kHalfTileElements = int64_t{1} << 24;

  struct MatmulOut {
    const DeviceMatrix* w;
    float* y;
  };

  void allocate();
  void release() noexcept;
  // One segment's rows: inputs to the device, the program (or its decode graph), outputs back.
  // select: how the head's rows are sampled on the device: 0 not (logits back), 1 greedy (the
  // argmax), k > 1 top-k (the k best back, the host draws among them).
  void runSegment(const runtime::Batch& batch, const runtime::Segment& segment, int32_t firstRow,
                  int32_t select, runtime::StageOutput& output);
  // The whole program for `count` rows of `sequence`, inputs already on the device (m_tokens or
  // X, m_position), result in X or m_logits. Only enqueues work, so that under stream capture it
  // records the decode graph.
  void enqueue(int32_t sequence, int64_t count, runtime::LogitRows logits);
  void runOp(const CudaOp& op, const CudaLayer& layer, int32_t sequence);
  // Whether `op` is a norm to run as rmsNormQuantize for `next`'s products.
  bool quantizesForNext(const CudaOp& op, const CudaOp* next) const;
  // Whether ops i and i + 1 of the layer run as one ropeStoreOp (the Attend's index, or 0).
  size_t fusedRopeStoreEnd(const CudaLayer& layer, size_t i) const;
  // The queries' and keys' RoPE and the cache store of the keys and values, in one launch.
  void ropeStoreOp(const CudaOp& q, const CudaOp& k, const CudaLayer& layer, int32_t sequence);

  // The ops, one function each (layer_program.h says what each computes).
  void rmsNormOp(const CudaOp& op, const CudaLayer& layer);
  void projectOp(const CudaOp& op, const CudaLayer& layer);
  void addBiasOp(const CudaOp& op, const CudaLayer& layer);
  void headNormOp(const CudaOp& op, const CudaLayer& layer);
  void ropeOp(const CudaOp& op, const CudaLayer& layer);
  void attendOp(const CudaOp& op, const CudaLayer& layer, int32_t sequence);
  void keepOutputRowsOp(const CudaLayer& layer);
  void addOp(const CudaOp& op, const CudaLayer& layer);
  void gatedFfnOp(const CudaOp& op, const CudaLayer& layer);
  void moeFfnOp(const CudaOp& op, const CudaLayer& layer);
  void scaleOp(const CudaOp& op, const CudaLayer& layer);
  // Gate = act(gate, up) with the op's activation, n floats.
  void activate(model::Activation activation, float* gate, const float* up, int64_t n);
  // Final norm and output projection of the rows still active.
  void head();

  // Drops the rows whose logits are not wanted (llama.cpp's inp_out_ids).
  void keepLogitRows();
  // Y = W · X for every output, X (the active rows) converted once for all of them.
  void matmuls(const float* x, std::span<const MatmulOut> outs);
  // The active rows of a buffer in a layer.
  float* buffer(model::Buffer b, const CudaLayer& layer) const;
  // Positions a layer's cache holds per sequence: its ring, or the whole context.
  int32_t kvPositions(const CudaLayer& layer) const {
    return layer.ring > 0 ? layer.ring : m_spec.contextLength;
  }
  __half* keyCache(const CudaLayer& layer, int32_t sequence) const;
  __half* valueCache(const CudaLayer& layer, int32_t sequence) const;

  int m_device = 0;
  std::shared_ptr<MemoryLedger> m_ledger;
  uint64_t m_held = 0;  // what this stage holds in m_ledger (its footprint once built)
  model::ModelConfig m_config;
  runtime::StageSpec m_spec;
  runtime::SequenceBook m_book;
  cudaStream_t m_stream = nullptr;
  cublasHandle_t m_cublas = nullptr;
  DeviceWeights m_weights;
  RopeTables m_ropeTables;
  std::vector<CudaLayer> m_layers;
  DeviceMatrix m_tokenEmbd, m_output;
  const float* m_outputNorm = nullptr;
  int32_t m_attentionSplits = 1;
  // The fused launches (rmsNormQuantize for a norm before quantized products, matvecSet for a
  // Project's outputs, matvecGated for a gated FFN, ropeStore for RoPE and the cache store,
  // attention merged by its last split);
  // SHOAL_CUDA_UNFUSED=1 turns them off, to measure what they buy or to rule them out.
  bool m_fused = true;
  // The buffer rows whose int8 activations m_xq holds already (a fused norm's output), for the
  // one op after it; nullptr otherwise.
  const float* m_quantizedFrom = nullptr;
  // The layer's keys and values are in the cache already (ropeStoreOp), for its Attend.
  bool m_kvStored = false;

  // Device memory, allocated once: the KV cache (per local layer and sequence, contextLength x
  // the layer's kvDim f16, keys then values) and the buffers of a batch of up to maxBatch rows.
  std::vector<void*> m_allocations;
  __half* m_kv = nullptr;
  std::vector<int64_t> m_kvBase;  // per local layer: offset of its caches in m_kv, in halves
  bool m_rings = false;           // some layer keeps a ring: segments run in chunks (kv_ring.h)
  std::array<float*, model::kBufferCount> m_buffers{};
  float *m_logits = nullptr, *m_partial = nullptr;
  unsigned* m_attentionTickets = nullptr;  // AttentionParams::tickets (the fused merge)
  int8_t* m_xq = nullptr;
  float2* m_xds = nullptr;
  __half* m_xHalf = nullptr;
  __half* m_wHalf = nullptr;  // one tile of a dequantized weight matrix (cuBLAS path)
  int32_t* m_tokens = nullptr;
  int32_t* m_position = nullptr;
  int32_t* m_sampled = nullptr;  // the head's greedy tokens, one per logits row
  // Top-k sampling on the device (topk.cu): a batch's best kMaxDeviceTopK logits per row, for at
  // most kTopKRows rows, and the selection's intermediate levels.
  float* m_topValues = nullptr;
  int32_t* m_topIds = nullptr;
  TopKScratch m_topScratch;

  // Mixture-of-experts scratch (allocated when a layer has one), for maxBatch tokens of `used`
  // entries each: router logits, the chosen experts and weights, every entry's gate/up rows and
  // down output, and the entries' gate rows as int8 blocks for the down product.
  struct MoeScratch {
    float* logits = nullptr;
    int32_t* ids = nullptr;
    float* weights = nullptr;
    float *gate = nullptr, *up = nullptr, *down = nullptr;
    int8_t* xq = nullptr;
    float2* xds = nullptr;
  } m_moe;

  // Pinned host staging: inputs (tokens, position) and the outputs that leave the device.
  int32_t* m_hostInput = nullptr;  // [0] position, [1..] tokens
  float* m_hostOut = nullptr;
  int32_t* m_hostSampled = nullptr;  // m_sampled's copy
  float* m_hostTopValues = nullptr;  // m_topValues' and m_topIds' copies
  int32_t* m_hostTopIds = nullptr;

  // The segment being enqueued: its active rows are [m_firstRow, m_firstRow + m_rows) of every
  // buffer (KeepOutputRows moves m_firstRow past the rows whose logits are not wanted).
  int64_t m_firstRow = 0;
  int64_t m_rows = 0;
  bool m_kept = false;
  runtime::LogitRows m_logitRows = runtime::LogitRows::Last;

  // Per sequence and whether logits are wanted: recorded on the first one-row segment.
  std::vector<cudaGraphExec_t> m_decodeGraphs;
};

}  // namespace shoal::cuda
