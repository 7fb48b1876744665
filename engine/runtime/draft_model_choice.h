#pragma once
// Which draft model to load for a target (speculative decoding, model_drafter.h): a path the
// user named, or "auto" — the largest GGUF with the target's vocabulary and at most an eighth of
// its file size, next to the target or in the default model folders (model/default_model.h). An
// eighth keeps a draft that turns out useless cheap: until its policy stops asking, it catches up
// with every token at prefill cost, about (its size ÷ the target's) of a decode step's work.

#include <filesystem>
#include <string>

#include "engine/model/tokenizer.h"

namespace shoal::runtime {

// "none" or "" → empty; "auto" → the best candidate, or empty when there is none; anything else
// is taken as a path (checked when it is loaded).
std::filesystem::path chooseDraftModel(const std::string& choice,
                                       const std::filesystem::path& targetPath,
                                       const model::Tokenizer& target);

}  // namespace shoal::runtime
