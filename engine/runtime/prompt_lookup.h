#pragma once
// Drafting by prompt lookup (n-gram matching against the text so far, no second model): the
// last n tokens of the history are looked up earlier in the history, and the tokens that
// followed that earlier occurrence are proposed as the continuation. Strong wherever a reply
// repeats what it has seen — a file rewritten with small edits, quoted passages, code that
// reuses names — and free where it finds nothing (no draft, no wasted work).
//
// The idea is Saxena's "prompt lookup decoding" (2023), as llama.cpp's `lookup` examples also
// use it; this is Shoal's own implementation: the longest n first, and among the occurrences of
// that n-gram the most recent one (a rewrite advances through its source in order).

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/tokenizer.h"

namespace shoal::runtime {

struct PromptLookupParams {
  int32_t maxDraft = 8;  // most tokens proposed at once (0: drafting off)
  int32_t minNgram = 2;  // shortest suffix looked up; 1-grams match too often to pay
  int32_t maxNgram = 4;  // longest suffix looked up
  // true: verify as many drafts as pay (DraftPolicy); false: every draft in full (tests, and
  // benchmarks of the mechanism itself).
  bool adaptive = true;
  bool operator==(const PromptLookupParams&) const = default;
};

// Fills `draft` with up to min(maxDraft, limit) tokens proposed to follow `history`, or leaves
// it empty when no suffix of minNgram..maxNgram tokens occurs earlier in the history.
void draftByPromptLookup(std::span<const model::TokenId> history, const PromptLookupParams& params,
                         int32_t limit, std::vector<model::TokenId>& draft);

}  // namespace shoal::runtime
