#pragma once
// Where Shoal's programs find the default model (SmolLM2-135M-Instruct Q4_1) when none is given
// with -m. One rule for shoal, shoal-cli and shoal-node, so a source build and an installed
// package behave alike.

#include <string>
#include <vector>

namespace shoal::model {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// The folders searched, in order: $SHOAL_MODELS_DIR; the source tree's models/ (filled by
// scripts/setup; compiled in); $XDG_DATA_HOME/shoal/models (or ~/.local/share/shoal/models);
// /var/lib/shoal/models (the two places shoal-fetch-default-model writes to).
std::vector<std::string> defaultModelDirs();

// $SHOAL_MODEL if set; else the first folder above that holds the default model file; else the
// path in the first folder (so the error message names where it was expected).
std::string defaultModelPath();

}  // namespace shoal::model
