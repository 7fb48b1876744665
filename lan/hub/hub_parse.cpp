#include "lan/hub/hub_parse.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <nlohmann/json.hpp>

#include "lan/json/json_bounds.h"

namespace shoal::lan::hub {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) {
  throw HubError(HubError::Kind::BadReply, "the Hub's reply is malformed: " + what);
}

// A search page or a tree listing of tens of thousands of files nests 3 deep and holds ~10 values
// per entry; these bounds leave room for that and keep a hostile mirror from crashing the parser.
constexpr JsonBounds kReplyBounds{32, size_t{1} << 21};

json parse(const std::string& body, const char* what) {
  if (const std::string violation = jsonBoundsViolation(body, kReplyBounds); !violation.empty()) {
    bad(std::string(what) + " " + violation);
  }
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad(std::string(what) + " is not JSON");
  if (!j.is_array()) bad(std::string(what) + " is not a JSON array");
  return j;
}

int64_t count(const json& entry, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end() || it->is_null()) return 0;
  if (!it->is_number_integer() && !it->is_number_unsigned()) bad(std::string("'") + key + "'");
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    return v > uint64_t{INT64_MAX} ? INT64_MAX : static_cast<int64_t>(v);
  }
  return std::max<int64_t>(0, it->get<int64_t>());
}

bool isLowerHex(const std::string& s, size_t length) {
  if (s.size() != length) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

bool isNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

uint64_t fileSize(const json& j, const std::string& path) {
  if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<int64_t>() >= 0)) {
    bad("the size of '" + path + "' is not a non-negative integer");
  }
  const uint64_t size = j.get<uint64_t>();
  if (size > kMaxFileBytes) bad("the size of '" + path + "' is " + std::to_string(size));
  return size;
}

}  // namespace

bool isSafeRepoPath(const std::string& path) {
  if (path.empty() || path.size() > 1000 || path.front() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string segment = path.substr(start, end - start);
    if (segment.empty() || segment.front() == '.') return false;  // also "." and ".."
    for (char c : segment) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u == 0x7f || c == '\\' || c == ':') return false;
    }
    start = end + 1;
  }
  return true;
}

bool isValidRepoId(const std::string& repo) {
  const size_t slash = repo.find('/');
  if (slash == std::string::npos || repo.find('/', slash + 1) != std::string::npos) return false;
  const std::string owner = repo.substr(0, slash);
  const std::string name = repo.substr(slash + 1);
  for (const std::string& side : {owner, name}) {
    if (side.empty() || side.size() > 96 || side == "." || side == "..") return false;
    for (char c : side) {
      if (!isNameChar(c)) return false;
    }
  }
  return true;
}

std::vector<RepoSummary> parseSearchReply(const std::string& body) {
  const json j = parse(body, "the search result");
  std::vector<RepoSummary> out;
  for (const json& entry : j) {
    if (!entry.is_object()) bad("a search result entry is not an object");
    auto id = entry.find("id");
    if (id == entry.end() || !id->is_string()) bad("a search result has no 'id'");
    RepoSummary r;
    r.id = id->get<std::string>();
    if (!isValidRepoId(r.id)) bad("repository id '" + r.id.substr(0, 200) + "'");
    r.downloads = count(entry, "downloads");
    r.likes = count(entry, "likes");
    if (auto lm = entry.find("lastModified"); lm != entry.end() && lm->is_string()) {
      r.lastModified = lm->get<std::string>().substr(0, 64);
    }
    // The Hub writes false, or the gating mode: "auto" / "manual".
    if (auto g = entry.find("gated"); g != entry.end()) {
      if (g->is_boolean()) {
        r.gated = g->get<bool>();
      } else if (g->is_string()) {
        r.gated = !g->get<std::string>().empty();
      } else if (!g->is_null()) {
        bad("'gated' of " + r.id);
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<RepoFile> parseTreeReply(const std::string& body) {
  const json j = parse(body, "the file list");
  std::vector<RepoFile> out;
  for (const json& entry : j) {
    if (!entry.is_object()) bad("a file list entry is not an object");
    auto type = entry.find("type");
    auto path = entry.find("path");
    if (type == entry.end() || !type->is_string()) bad("a file list entry has no 'type'");
    if (path == entry.end() || !path->is_string()) bad("a file list entry has no 'path'");
    if (type->get<std::string>() != "file") continue;  // "directory" (recursive lists its files)
    RepoFile f;
    f.path = path->get<std::string>();
    if (!isSafeRepoPath(f.path)) {
      bad("refusing the file path '" + f.path.substr(0, 200) +
          "' (absolute, '..', a backslash or a hidden name: it could write outside the models "
          "folder)");
    }
    auto size = entry.find("size");
    if (size == entry.end()) bad("'" + f.path + "' has no size");
    f.size = fileSize(*size, f.path);
    if (auto lfs = entry.find("lfs"); lfs != entry.end() && !lfs->is_null()) {
      if (!lfs->is_object()) bad("'lfs' of '" + f.path + "'");
      auto oid = lfs->find("oid");
      auto lfsSize = lfs->find("size");
      if (oid == lfs->end() || !oid->is_string()) bad("'" + f.path + "' has no LFS oid");
      // The Hub writes the bare hex digest; git-lfs pointers say "sha256:<hex>".
      std::string hex = oid->get<std::string>();
      if (hex.rfind("sha256:", 0) == 0) hex = hex.substr(7);
      if (!isLowerHex(hex, 64)) bad("the LFS oid of '" + f.path + "' is not a SHA-256");
      f.sha256 = hex;
      if (lfsSize != lfs->end()) f.size = fileSize(*lfsSize, f.path);
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace shoal::lan::hub
