#pragma once
// Drafting with a draft model: a second, smaller model with the same vocabulary (a small model of
// the target's family) on the coordinator's own device proposes the next tokens by decoding them
// greedily, and the target verifies them in one pass (Session). Where the target is a pool, a
// step of the target costs a round trip through every node while a step of a small local model
// costs a few milliseconds, so each confirmed draft saves far more than it cost.
//
// The draft model keeps its own KV cache of the history it has seen; before each draft it is
// rolled back to what it shares with the session's history (rejected drafts) and fed the rest
// (usually the last confirmed tokens: the first draft of a reply feeds the whole prompt, a
// prefill of the small model). Its output never changes the reply (the target verifies every
// token), only the speed: the session's DraftPolicy for model drafts decides how many tokens are
// worth drafting, none when they do not pay.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/runtime/chain.h"

namespace shoal::runtime {

class ModelDrafter {
 public:
  // `chain`: the draft model's chain (local stages); it must outlive the drafter. Each of its
  // KV slots keeps one history (a Session drafts in slot 0; a Scheduler in the slot of the
  // sequence it drafts for).
  explicit ModelDrafter(Chain& chain);

  // Fills `draft` with up to `count` tokens the draft model decodes greedily after `history`
  // (fewer where its context ends; none for an empty history), in KV slot `sequence` (one of
  // slotCount()). Returns the seconds spent catching up with a history that grew by more than
  // kPrefillTokens since that slot's last call (a new prompt: paid once per prompt, not per
  // draft), else 0.
  double propose(int32_t sequence, std::span<const model::TokenId> history, int32_t count,
                 std::vector<model::TokenId>& draft);
  double propose(std::span<const model::TokenId> history, int32_t count,
                 std::vector<model::TokenId>& draft) {
    return propose(0, history, count, draft);
  }
  static constexpr size_t kPrefillTokens = 16;

  // Histories the drafter keeps at once: the chain's KV slots.
  int32_t slotCount() const { return static_cast<int32_t>(m_fed.size()); }
  // Forget the draft model's cache (every slot).
  void reset();

  // Tokens drafted so far and the seconds spent drafting them (prefills included).
  int64_t draftedTokens() const { return m_drafted; }
  double seconds() const { return m_seconds; }

 private:
  Chain& m_chain;
  // Per slot: the tokens whose cache entries the draft model holds.
  std::vector<std::vector<model::TokenId>> m_fed;
  StageOutput m_out;
  int64_t m_drafted = 0;
  double m_seconds = 0;
};

// Why a draft model cannot draft for a target with `target`'s vocabulary (the token strings
// differ, or their number), or "" when it can.
std::string draftVocabularyMismatch(const model::Tokenizer& target, const model::Tokenizer& draft);

}  // namespace shoal::runtime
