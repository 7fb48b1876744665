#pragma once
// The ops of a layer program on the CPU, one small function each, run over the rows of a batch
// the way llama.cpp's CPU backend evaluates the same graph (ggml's order, so logits stay
// bit-identical). A batch may hold rows of several sequences (segments): the row-wise ops and
// the matrix products take all rows at once, RoPE turns each row by its own position, and
// Attend stores keys/values and attends per segment, in that segment's sequence.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/model/layer_program.h"
#include "engine/runtime/stage.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_layer_program.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/zeroed_buffer.h"

namespace shoal::cpu {

// Sees an intermediate tensor: name as llama.cpp's graph callbacks give it (cpu_layer_program.h
// says which op produces which), the model's layer index (-1 for the head), rows x cols floats,
// row-major, one row per live row of the batch.
using TensorObserver = std::function<void(std::string_view name, int32_t layer, const float* data,
                                          int64_t rows, int64_t cols)>;

class LayerRunner {
 public:
  // Sized once, for the stage's layers, `nEmbd` (embedding and head rows), the distinct RoPE
  // variants of its layers and batches of up to maxBatch rows, so that running never allocates.
  // ropeFreqs: rope_freqs.weight for RopeParams::freqFactors (nullptr when absent).
  LayerRunner(std::span<const CpuLayer> layers, int64_t nEmbd, std::vector<model::RopeParams> ropes,
              const float* ropeFreqs, int32_t maxBatch, std::shared_ptr<ThreadPool> pool);

  // Starts a (checked) batch: the position of every row, the rows KeepOutputRows keeps, the
  // RoPE angles of every row. The rows' input goes into buffer(Buffer::X) next.
  void begin(const runtime::Batch& batch);
  // One layer's ops, in order, over the live rows.
  void run(CpuLayer& layer);
  // From here on only the rows whose logits are wanted (each segment's last row for
  // LogitRows::Last, all for All, none for None), carrying the buffers `live` marks. Once per
  // batch: the model's last layer does it, or the head when its stage holds no layer.
  void keepOutputRows(const std::array<bool, model::kBufferCount>& live, const BufferWidths& width);
  // A matrix the stage multiplies over runs() besides the layers' (the head): scratch for
  // batches of maxBatch rows, and the run rule it needs (splitsTokensInFours).
  void addHeadMatrix(const WeightMatrix& w, int32_t maxBatch);
  bool keptOutputRows() const { return m_kept; }

  int64_t rows() const { return m_rows; }  // live rows
  // Live rows in runs of consecutive segments that get the same dot order. llama.cpp picks a
  // matmul's order from its token count; Shoal picks it per segment (from that segment's rows),
  // so a sequence's results do not depend on the other sequences in its batch (batch
  // invariance); a batch of one segment is one run, as llama.cpp computes it.
  struct RowRun {
    int64_t first = 0;        // first live row
    int64_t rows = 0;         // rows of the run
    int64_t orderTokens = 1;  // the order of a product of this many tokens (1, 2 or 8: dotOrder)
  };
  std::span<const RowRun> runs() const { return m_runs; }
  float* buffer(model::Buffer b) { return m_buffers[static_cast<size_t>(b)].data(); }
  ThreadPool& pool() { return *m_pool; }
  MatmulScratch& matmulScratch() { return m_matmulScratch; }

  void setObserver(TensorObserver observer) { m_observer = std::move(observer); }
  void observe(std::string_view name, int32_t layer, const float* data, int64_t rows,
               int64_t cols) const {
    if (m_observer) m_observer(name, layer, data, rows, cols);
  }

 private:
  void rmsNorm(const BoundOp& op);
  void project(const BoundOp& op);
  void addBias(const BoundOp& op);
  void headNorm(const BoundOp& op);
  void rope(const BoundOp& op);
  void attend(const BoundOp& op, CpuLayer& layer);
  void add(const BoundOp& op);
  void gatedFfn(const BoundOp& op);
  void scale(const BoundOp& op);
  void moeFfn(const BoundOp& op, int32_t layer);  // cpu_layer_moe.cpp
  void runExperts(const BoundOp& op, const float* src, int64_t groups);

  struct RopeTable {
    model::RopeParams params;
    std::vector<float> cos, sin;  // maxBatch x nRot/2: the angles of each row's position
  };

  std::shared_ptr<ThreadPool> m_pool;
  const float* m_ropeFreqs;
  std::vector<RopeTable> m_ropes;
  // Activations, one row per live row, each as wide as the widest use of the buffer; only the
  // rows of the largest batch seen so far are resident.
  std::array<ZeroedBuffer<float>, model::kBufferCount> m_buffers;
  std::vector<uint16_t> m_halfRow;  // one row of values as f16, before the transposed store
  AttentionScratch m_attnScratch;
  MatmulScratch m_matmulScratch;
  // MoeFfn's working rows, sized for the stage's widest MoE layer.
  struct MoeScratch {
    ZeroedBuffer<float> probs;     // rows x experts: router logits, then probabilities
    std::vector<int32_t> ranking;  // experts: one row's argsort
    std::vector<int32_t> chosen;   // rows x used: expert ids, most probable first
    std::vector<float> weights;    // rows x used: their weights
    // The (row * used + k) entries grouped by (expert, dot order): group 2e holds the rows that
    // take expert e's tiled order, 2e + 1 the others, rows ascending within a group.
    std::vector<int32_t> routed;
    std::vector<int32_t> placeOf;       // per (row * used + k): its index in `routed`
    std::vector<int32_t> nextFree;      // per group: the next free index while filling
    std::vector<int32_t> perExpert;     // groups + 1: offsets of the groups in `routed`
    std::vector<int32_t> segmentCount;  // experts: one segment's rows per expert
    struct Tile {
      int32_t group, begin, end;  // rows [begin, end) of the group's expert matrix
    };
    std::vector<Tile> tiles;
    // Per routed entry, in `routed` order: SwiGLU input/output (gate), up, expert output.
    ZeroedBuffer<float> gate, up, down;
  } m_moe;
  TensorObserver m_observer;

  // The batch being run.
  std::span<const runtime::Segment> m_segments;
  int64_t m_rows = 0;
  bool m_kept = false;
  std::vector<int32_t> m_positions;  // per live row
  std::vector<int32_t> m_keep;       // rows KeepOutputRows keeps, ascending
  int64_t m_keepCount = 0;
  std::vector<RowRun> m_runs;  // of the live rows
  // Some product over the runs splits its tokens in fours (splitsTokensInFours): then a prompt
  // segment joins a run only if that run's rows are a multiple of 4.
  bool m_runsInFours = false;
  // m_runs from the rows each segment has live now (all of them, or the kept ones).
  void buildRuns();
  // The rows of segment s live now.
  int64_t liveRows(const runtime::Segment& s) const;
};

}  // namespace shoal::cpu
