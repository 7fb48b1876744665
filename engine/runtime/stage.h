#pragma once
// A stage: a contiguous range of transformer layers [firstLayer, lastLayer) placed on one device,
// optionally with the token embedding (first stage) and the final norm + output head (last
// stage). A model is run as a chain of stages (engine/runtime/chain.h); a remote stage on another
// machine implements this same interface.
//
// A batch carries rows (token ids or hidden states) of one or more sequences: segments say which
// rows belong to which sequence and at which positions, and whether their logits are wanted. A
// caller may keep several batches in flight on a stage (submit, later wait), in submission order;
// a local stage computes in submit() and its wait() returns at once, a remote one sends in
// submit() and receives in wait().
//
// Threading: a Stage is used by one thread at a time (the chain's driver); it may use worker
// threads of its own inside submit()/wait().

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shoal::runtime {

struct StageSpec {
  int32_t firstLayer = 0;        // first layer held (inclusive)
  int32_t lastLayer = 0;         // one past the last layer held
  bool hasEmbedding = false;     // token ids in, embedding lookup first
  bool hasHead = false;          // final norm + output projection at the end: logits out
  int32_t contextLength = 2048;  // KV-cache capacity in positions, per sequence
  int32_t maxSequences = 1;      // independent sequences (KV slots) the stage holds
  int32_t maxBatch = 512;        // most rows (tokens) one batch may carry, all segments together
  bool operator==(const StageSpec&) const = default;
};

// Which rows of a segment produce logits on the head stage.
enum class LogitRows : uint8_t { None, Last, All };

// Consecutive rows of a batch that belong to one sequence.
struct Segment {
  int32_t sequence = 0;       // KV slot, 0 <= sequence < maxSequences
  int32_t firstPosition = 0;  // position of the segment's first row; the rest follow on
  int32_t count = 0;          // rows, >= 1
  LogitRows logits = LogitRows::Last;
  // Compute every row as a batch of that one row would (the products' and attention's dot
  // order of a single token), so that each row's results equal decoding the rows one at a
  // time: speculative decoding verifies drafted tokens this way and keeps greedy output
  // unchanged. The CPU stage honours it bit for bit; GPU stages, which promise accuracy rather
  // than bit-identity, may ignore it.
  bool decodeOrder = false;
  bool operator==(const Segment&) const = default;
};

// Sampling done by the head stage itself, so that logits need not travel (a remote head).
// Stages that cannot sample ignore it and return logits (StageOutput::tokens stays empty).
struct SampleRequest {
  float temperature = 0;  // <= 0: greedy
  float topP = 1;
  int32_t topK = 0;
  float minP = 0;
  uint64_t seed = 0;  // per draw: the caller derives it from the position, so a replay repeats it
};

struct Batch {
  std::span<const int32_t> tokens;        // hasEmbedding: one id per row
  std::span<const float> hidden;          // otherwise: rows x nEmbd hidden states
  std::span<const Segment> segments;      // in row order; their counts add up to the rows
  const SampleRequest* sample = nullptr;  // hasHead: sample a token per logits row if able
  // hasHead: one request per segment, each segment's logits rows sampled with its own (several
  // sequences drawing by position); a stage that cannot honour them returns the logits. Empty:
  // `sample` serves every row.
  std::span<const SampleRequest> samples = {};

  int32_t rows() const {
    int32_t n = 0;
    for (const Segment& s : segments) n += s.count;
    return n;
  }
};

struct StageOutput {
  std::vector<float> hidden;    // !hasHead: rows x nEmbd
  std::vector<float> logits;    // hasHead: one nVocab row per logits row, in row order
  std::vector<int32_t> tokens;  // hasHead and sampled: one per logits row (then logits empty)
};

// Device time of one kernel over the batches a stage ran while profiling.
struct KernelProfile {
  std::string kernel;        // the kernel (a GPU backend's shader name)
  uint64_t dispatches = 0;   // how many times it ran
  double seconds = 0;        // its device time in all (GPU timestamps)
  uint64_t weightBytes = 0;  // bytes of weight matrices it read in all
};

class Stage {
 public:
  using Ticket = uint64_t;

  virtual ~Stage() = default;

  virtual const StageSpec& spec() const = 0;

  // Starts the batch: its rows' keys/values are appended to each segment's sequence at
  // [firstPosition, firstPosition + count); firstPosition must not exceed the positions already
  // cached for the sequence, counting batches submitted before (truncate first to rewrite
  // history). `output` must stay alive, untouched, until wait() returns for the ticket; the
  // batch's spans need to live only during submit(). Throws shoal::Error on bad input (positions
  // beyond contextLength, bad sequence, row counts that do not add up).
  virtual Ticket submit(const Batch& batch, StageOutput& output) = 0;
  // Completes a submitted batch. Callers wait in submission order; a ticket never submitted (or
  // dropped by truncate()) is an error. Throws what the computation threw.
  virtual void wait(Ticket ticket) = 0;

  // submit() + wait().
  void forward(const Batch& batch, StageOutput& output) { wait(submit(batch, output)); }

  // Forget positions >= fromPosition of a sequence (0 clears it). No batch may be in flight.
  // Returns the positions kept: fromPosition (or the cached count, if lower), or fewer where
  // the stage can no longer resume there; the caller then recomputes from the returned
  // position. (A stage that keeps a sliding-window layer's cache as a ring of its last
  // positions, engine/model/kv_ring.h, returns 0 once the window before fromPosition is
  // overwritten.)
  virtual int32_t truncate(int32_t sequence, int32_t fromPosition) = 0;

  // Positions cached for a sequence, counting submitted batches.
  virtual int32_t cachedPositions(int32_t sequence) const = 0;

  // Until the work the stage started in the background when it was built is done (the CPU
  // stage's copy of its weights into huge pages, kernels/cpu/weight_arena.h), so that what
  // follows runs at the stage's steady speed. Never needed for correctness: benchmarks call it
  // to measure the steady state, as llama-bench measures after its load. No batch may be in
  // flight.
  virtual void settle() {}

  // Profiling (shoal-cli bench --profile): setProfiling(true) clears the profile and times every
  // kernel the stage runs on its device from then on; false where the stage cannot (a CPU stage,
  // a device without timestamps). profile() is what ran since, by kernel.
  virtual bool setProfiling(bool /*on*/) { return false; }
  virtual std::vector<KernelProfile> profile() const { return {}; }
  // The weight bytes one decoded token must read: every weight matrix the stage holds once (its
  // embedding's one row). 0 where unknown. A profile's weight bytes per token over it shows
  // whether a kernel reads weights more than once.
  virtual uint64_t decodeWeightBytes() const { return 0; }

  // How many batches in flight keep every device of the stage busy: 1 for a stage on one device;
  // a stage that spans several nodes forwarding to each other directly (lan/pool/linked_stages.h)
  // has one per node. The chain submits that many before it waits (Chain::forwardBatches).
  virtual size_t pipelineDepth() const { return 1; }

  // Decoding ahead, for a stage that holds the whole model (embedding and head) far from its
  // caller (a pool node: each call costs a network round trip): from `token` at `position` of
  // `sequence`, decode `count` tokens one after another, each computed as a decode step alone,
  // sampled by `sample` with seed sample.seed + j for the j-th (as a caller sampling each step
  // would seed it: Session seeds by position) and fed back as the next input. Returns the
  // tokens; positions [position, position + count) are cached afterwards (the last token is not
  // fed). So one round trip yields `count` tokens. decodeAheadLimit() is the most `count` may be;
  // 0 (the default) where the stage cannot, and decodeAhead() then throws shoal::Error. No batch
  // may be in flight.
  virtual int32_t decodeAheadLimit() const { return 0; }
  virtual std::vector<int32_t> decodeAhead(int32_t sequence, int32_t position, int32_t token,
                                           int32_t count, const SampleRequest& sample);
};

}  // namespace shoal::runtime
