#pragma once
// A stage: a contiguous range of transformer layers [firstLayer, lastLayer) placed on one device,
// optionally with the token embedding (first stage) and the final norm + output head (last
// stage). A model is run as a chain of stages (engine/runtime/chain.h); a remote stage on another
// machine implements this same interface.
//
// Threading: a Stage is used by one thread at a time (the chain's driver); it may use worker
// threads of its own inside forward().

#include <cstdint>
#include <span>
#include <vector>

namespace shoal::runtime {

struct StageSpec {
  int32_t firstLayer = 0;        // first layer held (inclusive)
  int32_t lastLayer = 0;         // one past the last layer held
  bool hasEmbedding = false;     // token ids in, embedding lookup first
  bool hasHead = false;          // final norm + output projection at the end: logits out
  int32_t contextLength = 2048;  // KV-cache capacity in positions, per sequence
  int32_t maxSequences = 1;      // independent sequences (KV slots) the stage holds
  int32_t maxBatch = 512;        // most tokens one forward() call may carry
};

struct StageInput {
  int32_t sequence = 0;             // KV slot, 0 <= sequence < maxSequences
  int32_t firstPosition = 0;        // position of the first token; the rest follow on
  int32_t count = 0;                // tokens in this batch, 1..maxBatch
  std::span<const int32_t> tokens;  // hasEmbedding: count ids
  std::span<const float> hidden;    // otherwise: count x nEmbd hidden states
  bool allLogits = false;           // hasHead: logits for every token, not only the last
};

struct StageOutput {
  std::vector<float> hidden;  // !hasHead: count x nEmbd
  std::vector<float> logits;  // hasHead: nVocab (or count x nVocab with allLogits)
};

class Stage {
 public:
  virtual ~Stage() = default;

  virtual const StageSpec& spec() const = 0;

  // Run the batch through the stage, appending its keys/values to the sequence's KV cache at
  // [firstPosition, firstPosition + count). firstPosition must not exceed the number of
  // positions already cached for the sequence (callers truncate first to rewrite history).
  // Throws shoal::Error on bad input (positions beyond contextLength, bad sequence).
  virtual void forward(const StageInput& input, StageOutput& output) = 0;

  // Forget positions >= fromPosition of a sequence (0 clears it).
  virtual void truncate(int32_t sequence, int32_t fromPosition) = 0;

  // Positions currently cached for a sequence.
  virtual int32_t cachedPositions(int32_t sequence) const = 0;
};

}  // namespace shoal::runtime
