#include "engine/runtime/draft_model_choice.h"

#include <exception>
#include <vector>

#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "engine/runtime/model_drafter.h"

namespace shoal::runtime {

std::filesystem::path chooseDraftModel(const std::string& choice,
                                       const std::filesystem::path& targetPath,
                                       const model::Tokenizer& target) {
  namespace fs = std::filesystem;
  if (choice.empty() || choice == "none") return {};
  if (choice != "auto") return choice;
  std::error_code ec;
  const auto targetSize = fs::file_size(targetPath, ec);
  if (ec) return {};
  std::vector<fs::path> dirs = {targetPath.parent_path()};
  for (const std::string& d : model::defaultModelDirs()) dirs.emplace_back(d);
  fs::path best;
  uintmax_t bestSize = 0;
  for (const fs::path& dir : dirs) {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path p = it->path();
      if (p.extension() != ".gguf" || fs::equivalent(p, targetPath, ec)) continue;
      const auto size = fs::file_size(p, ec);
      if (ec || size > targetSize / 8 || size <= bestSize) continue;
      try {
        const auto candidate = model::Model::load(p);
        if (!draftVocabularyMismatch(target, candidate->tokenizer()).empty()) continue;
      } catch (const std::exception&) {
        continue;  // not a model this build loads
      }
      bestSize = size;
      best = p;
    }
    ec.clear();
  }
  return best;
}

}  // namespace shoal::runtime
