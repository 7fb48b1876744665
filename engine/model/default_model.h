#pragma once
// Where Shoal's programs find the default model (SmolLM2-135M-Instruct Q4_1) when none is given
// with -m. One rule for shoal, shoal-cli and shoal-node, so a source build and an installed
// package behave alike — except that an installed program never looks into the build tree it was
// compiled in.

#include <string>
#include <vector>

namespace shoal::model {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// The folders searched, in order:
//   1. $SHOAL_MODELS_DIR, when set;
//   2. the source tree's models/ (filled by scripts/setup; compiled in), only while the running
//      executable lives inside the build tree it was built in (see runsFromBuildTree);
//   3. userModelsDir(): $XDG_DATA_HOME/shoal/models, else ~/.local/share/shoal/models;
//   4. <dir>/shoal/models for each dir of $XDG_DATA_DIRS (default /usr/local/share:/usr/share);
//   5. /var/lib/shoal/models (the shoal-node service's, shoal-fetch-default-model --system).
std::vector<std::string> defaultModelDirs();

// The user's own models folder: where shoal-fetch-default-model, the app's downloads and
// `shoal-cli models pull` put models. $XDG_DATA_HOME/shoal/models when XDG_DATA_HOME is set
// (and absolute, as the XDG spec requires), else $HOME/.local/share/shoal/models; empty when
// neither is known.
std::string userModelsDir();

// Whether the running executable (/proc/self/exe, resolved) lies inside the build directory this
// library was compiled in. False where /proc/self/exe cannot be read (not Linux).
bool runsFromBuildTree();

// $SHOAL_MODEL if set; else the first folder above that holds the default model file; else the
// path in the first folder (so the error message names where it was expected).
std::string defaultModelPath();

}  // namespace shoal::model
