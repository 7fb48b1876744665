#include "engine/runtime/prompt_lookup.h"

#include <algorithm>
#include <cstddef>

namespace shoal::runtime {

void draftByPromptLookup(std::span<const model::TokenId> history, const PromptLookupParams& params,
                         int32_t limit, std::vector<model::TokenId>& draft) {
  draft.clear();
  const int64_t most = std::min(params.maxDraft, limit);
  const auto size = static_cast<int64_t>(history.size());
  if (most <= 0 || params.minNgram < 1) return;
  for (int64_t n = std::min<int64_t>(params.maxNgram, size - 1); n >= params.minNgram; --n) {
    const std::span<const model::TokenId> suffix = history.subspan(static_cast<size_t>(size - n));
    // The most recent earlier occurrence: it starts at `at` and ends before the suffix does.
    for (int64_t at = size - n - 1; at >= 0; --at) {
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + at)) continue;
      const int64_t from = at + n;  // the tokens that followed it (at most up to the end)
      const int64_t count = std::min(most, size - from);
      draft.assign(history.begin() + from, history.begin() + from + count);
      return;
    }
  }
}

}  // namespace shoal::runtime
