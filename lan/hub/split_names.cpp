// File-name rules of GGUF repositories: llama.cpp's split naming ("%s-%05d-of-%05d.gguf", as
// gguf-split writes it) and the quantization that uploaders put in the name.

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <tuple>

#include "lan/hub/hub_client.h"

namespace shoal::lan::hub {
namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

bool endsWithGguf(const std::string& path) {
  return path.size() > 5 && upper(path.substr(path.size() - 5)) == ".GGUF";
}

std::string baseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

SplitName parseSplitName(const std::string& path) {
  // "-00001-of-00003.gguf": 5 digits each (llama.cpp's %05d; more digits if a count ever needs
  // them), the part 1-based and not above the count.
  static const std::regex kSplit(R"(^(.+)-([0-9]{5,})-of-([0-9]{5,})\.[gG][gG][uU][fF]$)");
  std::smatch m;
  SplitName name;
  if (!std::regex_match(path, m, kSplit) || m[2].length() > 9 || m[3].length() > 9) {
    name.base = endsWithGguf(path) ? path.substr(0, path.size() - 5) : path;
    return name;
  }
  const int part = std::stoi(m[2].str());
  const int count = std::stoi(m[3].str());
  if (part < 1 || count < 1 || part > count) {
    name.base = path.substr(0, path.size() - 5);
    return name;
  }
  name.base = m[1].str();
  name.part = part;
  name.count = count;
  return name;
}

std::string quantizationFromName(const std::string& path) {
  // The last token of the file name (split at '-' and '.') that looks like a ggml type name:
  // Q4_K_M, Q8_0, IQ4_XS, IQ2_XXS, TQ1_0, F16, BF16, F32, MXFP4 ("UD-Q4_K_XL" gives Q4_K_XL).
  static const std::regex kQuant(R"(^(I?Q[1-8](_[0-9A-Z]+)*|TQ[12]_0|B?F16|F32|MXFP4)$)");
  std::string stem = parseSplitName(baseName(path)).base;
  stem = upper(stem);
  std::vector<std::string> tokens;
  std::string token;
  for (char c : stem) {
    if (c == '-' || c == '.') {
      tokens.push_back(token);
      token.clear();
    } else {
      token += c;
    }
  }
  tokens.push_back(token);
  for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) {
    if (std::regex_match(*it, kQuant)) return *it;
  }
  return "";
}

std::vector<ModelFile> groupModels(const std::vector<RepoFile>& files) {
  std::vector<ModelFile> models;
  // Split parts by (base, count); the map keeps each group's parts by number.
  std::map<std::pair<std::string, int>, std::map<int, RepoFile>> splits;
  for (const RepoFile& f : files) {
    if (!endsWithGguf(f.path)) continue;
    // Vision projectors ("mmproj-…gguf") ride along with multimodal models; they are not a model
    // one can load on its own.
    if (upper(baseName(f.path)).rfind("MMPROJ", 0) == 0) continue;
    const SplitName split = parseSplitName(f.path);
    if (split.part == 0) {
      ModelFile m;
      m.name = f.path;
      m.quantization = quantizationFromName(f.path);
      m.parts = {f};
      m.totalBytes = f.size;
      models.push_back(std::move(m));
      continue;
    }
    splits[{split.base, split.count}].emplace(split.part, f);  // a duplicate part keeps the first
  }
  for (const auto& [key, parts] : splits) {
    const auto& [base, count] = key;
    ModelFile m;
    char suffix[40];
    std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", 1, count);
    // The first part's name, even when that part is missing (so the model keeps its name).
    m.name = parts.begin()->first == 1 ? parts.begin()->second.path : base + suffix;
    m.quantization = quantizationFromName(m.name);
    for (const auto& [number, file] : parts) {
      m.parts.push_back(file);
      m.totalBytes += file.size;
    }
    m.complete = static_cast<int>(parts.size()) == count;
    models.push_back(std::move(m));
  }
  std::sort(models.begin(), models.end(),
            [](const ModelFile& a, const ModelFile& b) { return a.name < b.name; });
  return models;
}

}  // namespace shoal::lan::hub
