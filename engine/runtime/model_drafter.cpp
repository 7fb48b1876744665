#include "engine/runtime/model_drafter.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "engine/error.h"

namespace shoal::runtime {

ModelDrafter::ModelDrafter(Chain& chain) : m_chain(chain) {
  int32_t slots = chain.stage(0).spec().maxSequences;
  for (size_t i = 1; i < chain.stageCount(); ++i) {
    slots = std::min(slots, chain.stage(i).spec().maxSequences);
  }
  m_fed.resize(static_cast<size_t>(std::max(slots, 1)));
}

void ModelDrafter::reset() {
  for (size_t s = 0; s < m_fed.size(); ++s) {
    m_chain.truncate(static_cast<int32_t>(s), 0);
    m_fed[s].clear();
  }
}

double ModelDrafter::propose(int32_t sequence, std::span<const model::TokenId> history,
                             int32_t count, std::vector<model::TokenId>& draft) {
  using Clock = std::chrono::steady_clock;
  draft.clear();
  if (sequence < 0 || sequence >= slotCount()) {
    throw Error("draft model: slot " + std::to_string(sequence) + " of " +
                std::to_string(slotCount()));
  }
  std::vector<model::TokenId>& fed = m_fed[static_cast<size_t>(sequence)];
  const auto t0 = Clock::now();
  const int64_t room = int64_t{m_chain.contextLength()} - static_cast<int64_t>(history.size());
  count = static_cast<int32_t>(std::min<int64_t>(count, room));
  if (count <= 0 || history.empty()) return 0;
  // Keep what the cache shares with the history; the last history token is always run again,
  // for the logits of the token after it.
  size_t common = 0;
  while (common < fed.size() && common < history.size() && fed[common] == history[common]) {
    ++common;
  }
  common = std::min(common, history.size() - 1);
  if (common < fed.size()) {
    common = static_cast<size_t>(m_chain.truncate(sequence, static_cast<int32_t>(common)));
    fed.resize(common);
  }
  // A new prompt runs as a batch, the few tokens a step confirmed in decode order: as the target
  // computed them, so a draft model that is the target proposes exactly the target's tokens.
  const bool prefill = history.size() - common > kPrefillTokens;
  m_chain.forward(sequence, static_cast<int32_t>(common), history.subspan(common), m_out,
                  LogitRows::Last, nullptr, !prefill);
  fed.assign(history.begin(), history.end());
  const double prefillSeconds =
      prefill ? std::chrono::duration<double>(Clock::now() - t0).count() : 0.0;
  for (int32_t i = 0;; ++i) {
    const auto best = std::max_element(m_out.logits.begin(), m_out.logits.end());
    const auto token = static_cast<model::TokenId>(best - m_out.logits.begin());
    draft.push_back(token);
    if (i + 1 == count) break;
    m_chain.forward(sequence, static_cast<int32_t>(fed.size()), std::span(&token, 1), m_out);
    fed.push_back(token);
  }
  m_drafted += count;
  m_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return prefillSeconds;
}

std::string draftVocabularyMismatch(const model::Tokenizer& target, const model::Tokenizer& draft) {
  if (target.size() != draft.size()) {
    return "its vocabulary has " + std::to_string(draft.size()) + " tokens, the model's " +
           std::to_string(target.size());
  }
  for (model::TokenId id = 0; id < target.size(); ++id) {
    if (target.tokenBytes(id, true) != draft.tokenBytes(id, true)) {
      return "token " + std::to_string(id) + " differs from the model's";
    }
  }
  return "";
}

}  // namespace shoal::runtime
