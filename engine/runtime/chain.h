#pragma once
// A chain of stages that together cover a model's layers: token ids go in at the first stage,
// hidden states pass from stage to stage, logits (or tokens sampled by the head stage) come out
// of the last. Single-machine inference is a chain of one stage (or several: GPU + CPU); a pool
// is a chain whose stages are remote (lan/pool/remote_stage.h).
//
// A long run of tokens is cut into micro-batches of at most maxBatch rows, and micro-batch k+1
// enters stage 0 while micro-batch k is in stage 1 (submit/wait), so the stages of a pipeline
// work at once; the result is the same as running them one after another.

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "engine/runtime/stage.h"

namespace shoal::runtime {

class Chain {
 public:
  // The stages must join: the first has the embedding, the last the head, and each starts where
  // the previous one ends. Throws shoal::Error otherwise.
  explicit Chain(std::vector<std::unique_ptr<Stage>> stages);
  explicit Chain(std::vector<std::shared_ptr<Stage>> stages);

  // Runs `tokens` of `sequence` at positions [firstPosition, firstPosition + size) and returns
  // what the head produced for the rows `logits` asks for: logits rows, or, when `sample` is
  // given and the head stage samples, one token per such row (out.tokens). For LogitRows::Last,
  // only the final micro-batch's last row. decodeOrder: every row computed as if decoded alone
  // (Segment::decodeOrder; speculative verification).
  void forward(int32_t sequence, int32_t firstPosition, std::span<const int32_t> tokens,
               StageOutput& out, LogitRows logits = LogitRows::Last,
               const SampleRequest* sample = nullptr, bool decodeOrder = false);
  // Convenience for local chains: the logits of the last token (or of every token).
  void forward(int32_t sequence, int32_t firstPosition, std::span<const int32_t> tokens,
               std::vector<float>& logits, bool allLogits = false);
  // One batch of several sequences (at most maxBatch rows) through every stage.
  void forwardBatch(const Batch& batch, StageOutput& out);
  // Several batches (of different sequences, each at most maxBatch rows) through every stage as
  // a wavefront: batch k + 1 enters stage 0 while batch k is in stage 1, so on a chain of remote
  // stages every node works at once; outs[k] receives batch k's head output. A chain of one stage
  // keeps up to its pipelineDepth() batches in flight instead (nodes linked directly pass the
  // batches on among themselves). The result is the same as running them one after another. The
  // batches' spans must live during the call.
  void forwardBatches(std::span<const Batch> batches, std::span<StageOutput> outs);

  // A chain of one stage that keeps several batches in flight (nodes linked directly: the
  // stage's pipelineDepth() > 1) can also run them one at a time without waves: submit() a batch,
  // wait() for it later, in submission order, with others in flight meanwhile — so a scheduler
  // refills the pipeline as each batch comes back instead of draining it every step. Returns
  // that depth; 0 for any other chain (submit/wait then throw shoal::Error).
  size_t asyncDepth() const;
  Stage::Ticket submit(const Batch& batch, StageOutput& out);
  void wait(Stage::Ticket ticket);

  // Stage::truncate on every stage; returns the fewest positions a stage kept (the caller
  // recomputes from there).
  int32_t truncate(int32_t sequence, int32_t fromPosition);

  // Decoding ahead (Stage::decodeAhead) on a chain of one stage that can: the most tokens one
  // call may decode, 0 for any other chain (decodeAhead then throws shoal::Error).
  int32_t decodeAheadLimit() const;
  std::vector<int32_t> decodeAhead(int32_t sequence, int32_t position, int32_t token, int32_t count,
                                   const SampleRequest& sample);

  int32_t contextLength() const;  // the smallest of the stages'
  int32_t maxBatch() const;
  // Batches in flight that keep every device of the chain busy: the stages' pipelineDepth()
  // added up (a scheduler cuts a step into that many batches).
  size_t pipelineDepth() const;
  size_t stageCount() const { return m_stages.size(); }
  Stage& stage(size_t i) { return *m_stages[i]; }
  // The index of the stage whose submit/wait/truncate threw last (for recovery: which node).
  // When a stage throws in forward(), the other stages are told to forget the run's positions
  // (truncate, best effort) so that no batch stays in flight on them.
  size_t failedStage() const { return m_failedStage; }

 private:
  void checkJoins() const;
  // forward()'s micro-batches through forwardBatches, without its clean-up on failure.
  void runWaves(int32_t sequence, int32_t firstPosition, std::span<const int32_t> tokens,
                StageOutput& out, LogitRows logits, const SampleRequest* sample, bool decodeOrder);

  std::vector<std::shared_ptr<Stage>> m_stages;
  size_t m_failedStage = 0;
  // Per micro-batch in flight and stage: the stage's output (reused across calls).
  std::vector<std::vector<StageOutput>> m_outputs;
  // forward()'s micro-batches and their head outputs (reused across calls).
  std::vector<Segment> m_microSegments;
  std::vector<Batch> m_microBatches;
  std::vector<StageOutput> m_microOuts;
};

}  // namespace shoal::runtime
