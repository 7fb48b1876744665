// File-name rules of GGUF repositories: llama.cpp's split naming ("%s-%05d-of-%05d.gguf", as
// gguf-split writes it) and the quantization that uploaders put in the name.

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <tuple>
#include <vector>

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
  // "<base>-00001-of-00003.gguf": 5 digits each (llama.cpp's %05d; more if a count ever needs
  // them, at most 9 so they fit an int), the part 1-based and not above the count. Parsed by
  // hand: GCC 12's <regex> trips -Wmaybe-uninitialized in the sanitizer build.
  SplitName name;
  name.base = endsWithGguf(path) ? path.substr(0, path.size() - 5) : path;
  if (!endsWithGguf(path)) return name;
  const std::string& stem = name.base;
  const size_t of = stem.rfind("-of-");
  if (of == std::string::npos) return name;
  const std::string countDigits = stem.substr(of + 4);
  size_t partStart = of;
  while (partStart > 0 && std::isdigit(static_cast<unsigned char>(stem[partStart - 1]))) {
    --partStart;
  }
  const std::string partDigits = stem.substr(partStart, of - partStart);
  const auto digitsOk = [](const std::string& d) {
    return d.size() >= 5 && d.size() <= 9 &&
           std::all_of(d.begin(), d.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  };
  // A base of at least one character, then '-', then the part number.
  if (!digitsOk(partDigits) || !digitsOk(countDigits) || partStart < 2 ||
      stem[partStart - 1] != '-') {
    return name;
  }
  const int part = std::stoi(partDigits);
  const int count = std::stoi(countDigits);
  if (part < 1 || count < 1 || part > count) return name;
  name.base = stem.substr(0, partStart - 1);
  name.part = part;
  name.count = count;
  return name;
}

namespace {

// A ggml type name as uploaders write it: I?Q[1-8](_[0-9A-Z]+)* (Q4_K_M, IQ4_XS, Q8_0, Q4_K_XL),
// TQ1_0, TQ2_0, F16, BF16, F32, MXFP4. `t` is upper-case.
bool isQuantToken(const std::string& t) {
  for (const char* exact : {"TQ1_0", "TQ2_0", "F16", "BF16", "F32", "MXFP4"}) {
    if (t == exact) return true;
  }
  size_t i = t.size() > 0 && t[0] == 'I' ? 1 : 0;
  if (t.size() < i + 2 || t[i] != 'Q' || t[i + 1] < '1' || t[i + 1] > '8') return false;
  // Then nothing, or segments "_" + [0-9A-Z]+: a leading '_', no "__", no trailing '_'.
  const std::string rest = t.substr(i + 2);
  if (rest.empty()) return true;
  if (rest.front() != '_' || rest.back() == '_' || rest.find("__") != std::string::npos) {
    return false;
  }
  return std::all_of(rest.begin(), rest.end(), [](unsigned char c) {
    return c == '_' || std::isdigit(c) != 0 || (c >= 'A' && c <= 'Z');
  });
}

}  // namespace

std::string quantizationFromName(const std::string& path) {
  // The last token of the file name (split at '-' and '.') that looks like a ggml type name
  // ("UD-Q4_K_XL" gives Q4_K_XL).
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
    if (isQuantToken(*it)) return *it;
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
