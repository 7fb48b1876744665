#pragma once
// A chain of stages that together cover a model's layers: token ids go in at the first stage,
// hidden states pass from stage to stage, logits come out of the last. Single-machine inference
// is a chain of one stage; a pool is a chain whose middle stages are remote.

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

  // Run `tokens` at positions [firstPosition, firstPosition + size) of `sequence` and return the
  // logits of the last token (or of every token with allLogits), split into batches of at most
  // the smallest maxBatch of the stages.
  void forward(int32_t sequence, int32_t firstPosition, std::span<const int32_t> tokens,
               std::vector<float>& logits, bool allLogits = false);

  void truncate(int32_t sequence, int32_t fromPosition);

  int32_t contextLength() const;  // the smallest of the stages'
  int32_t maxBatch() const;
  size_t stageCount() const { return m_stages.size(); }
  Stage& stage(size_t i) { return *m_stages[i]; }

 private:
  std::vector<std::unique_ptr<Stage>> m_stages;
  StageOutput m_scratch[2];  // ping-pong buffers between stages, reused across calls
};

}  // namespace shoal::runtime
