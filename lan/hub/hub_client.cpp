#include "lan/hub/hub_client.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <system_error>

#include "lan/hub/curl_request.h"
#include "lan/hub/hub_errors.h"
#include "lan/hub/hub_parse.h"
#include "lan/hub/partial_download.h"

namespace shoal::lan::hub {
namespace {

namespace fs = std::filesystem;
using Kind = HubError::Kind;
using Clock = std::chrono::steady_clock;

// A JSON listing larger than this is not a listing (a repository with ~100k files is ~20 MB).
constexpr size_t kMaxReplyBytes = size_t{64} << 20;
// Pages of a paginated tree followed at most (the Hub pages 1000 entries at a time), and the
// files believed of one repository in all (the largest GGUF repositories list a few hundred).
constexpr int kMaxPages = 100;
constexpr size_t kMaxRepoFiles = 100000;

void requireRepo(const std::string& repo) {
  if (!isValidRepoId(repo)) {
    throw HubError(Kind::NotFound, "'" + repo + "' is not a repository name (owner/name)");
  }
}

std::string escapePath(const std::string& path) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    out += urlEscape(path.substr(start, slash == std::string::npos ? slash : slash - start));
    if (slash == std::string::npos) break;
    out += '/';
    start = slash + 1;
  }
  return out;
}

// "scheme://host[:port]" of a URL, to keep pagination links on the endpoint's server.
std::string originOf(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const size_t end = url.find('/', scheme + 3);
  return url.substr(0, end);
}

struct TextReply {
  std::string body;
  std::string linkNext;
};

// GET of a JSON API endpoint; HubError for anything but a 200 with a bounded body.
TextReply getText(const HubOptions& options, const std::string& url,
                  const RequestSubject& subject) {
  CurlRequest request(options, url);
  request.acceptCompression();
  std::string body;
  bool tooLong = false;
  request.onBody([&](const ResponseHead& head, std::span<const uint8_t> bytes) {
    // An error's body is only read for its message: keep its start, drop the rest.
    const size_t limit = head.status == 200 ? kMaxReplyBytes : kMaxErrorBodyBytes;
    if (body.size() + bytes.size() > limit) {
      if (head.status != 200) {
        body.append(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(limit - body.size()));
        return true;
      }
      tooLong = true;
      return false;
    }
    body.append(bytes.begin(), bytes.end());
    return true;
  });
  const CURLcode code = request.perform();
  if (tooLong) throw HubError(Kind::BadReply, "the reply of " + url + " is too large");
  if (code != CURLE_OK) throwTransferError(code, request, "cannot reach the Hub");
  if (request.head().status != 200) {
    throwHttpError(request.head(), body, subject, options, url);
  }
  return {std::move(body), request.head().linkNext};
}

// Rate and reporting throttle of one download() call.
class ProgressMeter {
 public:
  ProgressMeter(const std::function<void(const DownloadProgress&)>& sink, uint64_t total, int parts)
      : m_sink(sink) {
    m_state.totalBytes = total;
    m_state.parts = parts;
  }

  void update(int part, uint64_t done, bool verifying, bool force = false) {
    if (!m_sink) return;
    const auto now = Clock::now();
    // A new part starts with the bytes an earlier run left, and hashing moves no bytes: neither
    // is transfer, so the rate is measured afresh from the next report.
    if (verifying || part != m_state.part) m_windowStart = Clock::time_point{};
    if (!verifying) {
      if (m_windowStart == Clock::time_point{}) {
        m_windowStart = now;
        m_windowBytes = done;
      }
      const double seconds = std::chrono::duration<double>(now - m_windowStart).count();
      if (seconds >= 0.5 && done >= m_windowBytes) {
        const double rate = static_cast<double>(done - m_windowBytes) / seconds;
        // Smoothed over a few windows so an ETA does not jump with each burst.
        m_state.bytesPerS = m_state.bytesPerS == 0 ? rate : 0.6 * m_state.bytesPerS + 0.4 * rate;
        m_windowStart = now;
        m_windowBytes = done;
      }
    }
    const bool changed = part != m_state.part || verifying != m_state.verifying;
    m_state.part = part;
    m_state.doneBytes = done;
    m_state.verifying = verifying;
    if (!force && !changed && now - m_lastReport < std::chrono::milliseconds(100)) return;
    m_lastReport = now;
    m_sink(m_state);
  }

 private:
  const std::function<void(const DownloadProgress&)>& m_sink;
  DownloadProgress m_state;
  Clock::time_point m_lastReport{};
  Clock::time_point m_windowStart{};
  uint64_t m_windowBytes = 0;
};

}  // namespace

HubClient::HubClient(HubOptions options) : m_options(std::move(options)) {
  while (!m_options.endpoint.empty() && m_options.endpoint.back() == '/') {
    m_options.endpoint.pop_back();
  }
}

HubClient HubClient::fromEnvironment() {
  HubOptions options;
  if (const char* endpoint = std::getenv("HF_ENDPOINT"); endpoint && *endpoint) {
    options.endpoint = endpoint;
  }
  if (const char* token = std::getenv("HF_TOKEN"); token && *token) options.token = token;
  return HubClient(std::move(options));
}

std::vector<RepoSummary> HubClient::search(const std::string& text, SearchSort sort,
                                           int limit) const {
  limit = std::clamp(limit, 1, 1000);
  const std::string url =
      m_options.endpoint + "/api/models?search=" + urlEscape(text) +
      "&filter=gguf&sort=" + (sort == SearchSort::Downloads ? "downloads" : "lastModified") +
      "&direction=-1&limit=" + std::to_string(limit);
  auto found = parseSearchReply(getText(m_options, url, {}).body);
  if (found.size() > static_cast<size_t>(limit)) found.resize(static_cast<size_t>(limit));
  return found;
}

std::vector<ModelFile> HubClient::listModels(const std::string& repo,
                                             const std::string& revision) const {
  requireRepo(repo);
  std::string url = m_options.endpoint + "/api/models/" + repo + "/tree/" + urlEscape(revision) +
                    "?recursive=true";
  const std::string origin = originOf(m_options.endpoint);
  std::vector<RepoFile> files;
  for (int page = 0; page < kMaxPages && !url.empty(); ++page) {
    TextReply reply = getText(m_options, url, {repo, revision, ""});
    auto more = parseTreeReply(reply.body);
    if (files.size() + more.size() > kMaxRepoFiles) {
      throw HubError(Kind::BadReply,
                     "'" + repo + "' lists more than " + std::to_string(kMaxRepoFiles) + " files");
    }
    files.insert(files.end(), more.begin(), more.end());
    // Follow the next page only on the endpoint's own server (the token goes with it).
    url = originOf(reply.linkNext) == origin ? reply.linkNext : "";
  }
  return groupModels(files);
}

std::vector<uint8_t> HubClient::fetchPrefix(const std::string& repo, const RepoFile& file,
                                            uint64_t maxBytes, const std::string& revision,
                                            const DownloadControl* control) const {
  requireRepo(repo);
  if (!isSafeRepoPath(file.path)) {
    throw HubError(Kind::BadReply, "refusing the file path '" + file.path.substr(0, 200) + "'");
  }
  if (file.size > 0) maxBytes = std::min(maxBytes, file.size);
  std::vector<uint8_t> bytes;
  if (maxBytes == 0) return bytes;
  const std::string url = resolveUrl(repo, file.path, revision);
  CurlRequest request(m_options, url);
  request.setRange(0, maxBytes - 1);
  std::string errorBody;
  bool enough = false;
  request.onBody([&](const ResponseHead& head, std::span<const uint8_t> chunk) {
    if (head.status != 200 && head.status != 206) {
      if (errorBody.size() < 4096) errorBody.append(chunk.begin(), chunk.end());
      return true;
    }
    const size_t take = std::min<uint64_t>(chunk.size(), maxBytes - bytes.size());
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + static_cast<ptrdiff_t>(take));
    // A server that ignores Range sends the whole file: stop once there is enough.
    enough = bytes.size() >= maxBytes;
    return !enough;
  });
  request.onProgress([control](uint64_t, uint64_t) { return !(control && control->stop.load()); });
  const CURLcode code = request.perform();
  const long status = request.head().status;
  if (code == CURLE_ABORTED_BY_CALLBACK && control && control->stop.load()) {
    throw HubError(Kind::Cancelled, "header fetch of '" + file.path + "' stopped");
  }
  if (code != CURLE_OK && !(enough && code == CURLE_WRITE_ERROR)) {
    throwTransferError(code, request, "cannot fetch the header of '" + file.path + "'");
  }
  if (status != 200 && status != 206) {
    throwHttpError(request.head(), errorBody, {repo, revision, file.path}, m_options, url);
  }
  return bytes;
}

fs::path HubClient::download(const std::string& repo, const ModelFile& model,
                             const fs::path& modelsDir,
                             const std::function<void(const DownloadProgress&)>& progress,
                             DownloadControl* control, const std::string& revision) const {
  requireRepo(repo);
  if (model.parts.empty()) throw HubError(Kind::NotFound, "'" + model.name + "' has no files");
  if (!model.complete) {
    throw HubError(Kind::NotFound, "'" + model.name +
                                       "' is a split model with parts missing from the "
                                       "repository; it cannot be downloaded");
  }
  // Check every part's path (and that no two land on one name) before writing anything.
  for (size_t i = 0; i < model.parts.size(); ++i) {
    const fs::path a = partPaths(modelsDir, model.parts[i]).finished;
    for (size_t k = 0; k < i; ++k) {
      if (partPaths(modelsDir, model.parts[k]).finished == a) {
        throw HubError(Kind::BadReply,
                       "two parts of '" + model.name + "' have the name " + a.filename().string());
      }
    }
  }
  uint64_t total = 0;
  for (const RepoFile& f : model.parts) total += f.size;
  ProgressMeter meter(progress, total, static_cast<int>(model.parts.size()));
  fs::path first;
  uint64_t before = 0;  // bytes of the parts already done
  for (size_t i = 0; i < model.parts.size(); ++i) {
    if (control && control->stop.load()) {
      throw HubError(Kind::Cancelled, "download of '" + model.name + "' stopped");
    }
    const int part = static_cast<int>(i);
    PartRequest request;
    request.url = resolveUrl(repo, model.parts[i].path, revision);
    request.repo = repo;
    request.revision = revision;
    request.file = model.parts[i];
    request.modelsDir = modelsDir;
    request.control = control;
    request.progress = [&](uint64_t bytes, bool verifying) {
      // While verifying, doneBytes stays at the part's end (the bytes are all there).
      meter.update(part, before + (verifying ? model.parts[i].size : bytes), verifying);
    };
    const fs::path done = downloadPart(m_options, request);
    if (i == 0) first = done;
    before += model.parts[i].size;
    meter.update(part, before, false, /*force=*/true);
  }
  return first;
}

void HubClient::discardPartial(const ModelFile& model, const fs::path& modelsDir) {
  std::error_code ec;
  for (const RepoFile& f : model.parts) {
    if (!isSafeRepoPath(f.path)) continue;
    const PartPaths p = partPaths(modelsDir, f);
    fs::remove(p.part, ec);
    fs::remove(p.note, ec);
    fs::remove(p.note.string() + ".tmp", ec);
    fs::remove(p.rejected, ec);
    fs::remove(p.lock, ec);
  }
  // Only when nothing else is partial (remove() of a non-empty directory fails and is ignored).
  fs::remove(modelsDir / ".partial", ec);
}

std::string HubClient::resolveUrl(const std::string& repo, const std::string& path,
                                  const std::string& revision) const {
  return m_options.endpoint + "/" + repo + "/resolve/" + urlEscape(revision) + "/" +
         escapePath(path);
}

}  // namespace shoal::lan::hub
