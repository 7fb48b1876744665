#pragma once
// A client for the Hugging Face Hub's HTTP API (search, a repository's files, downloads), over
// libcurl. Plain C++ (no Qt, no Asio) so the CLI and the desktop app use the same code.
//
// Why libcurl (Debian's libcurl4-openssl-dev): TLS with the system's CA store, redirects (the Hub
// answers downloads with a 302 to its CDN), the system proxy (http_proxy/https_proxy/no_proxy,
// read by libcurl itself), Range requests and timeouts are each solved there; cpp-httplib (which
// the API server uses) has no proxy environment support and no resumable client.
//
// Environment (read by HubClient::fromEnvironment):
//   HF_ENDPOINT  the Hub's base URL (default https://huggingface.co): a mirror or a test server
//   HF_TOKEN     a user access token, sent as "Authorization: Bearer" to the endpoint only (never
//                to a host a redirect leads to), for gated and private repositories
//
// The client never talks to the network unless a method is called: nothing at start-up.
// Every method blocks; call it from a worker thread. Errors throw HubError with a message a
// person can act on ("… is gated: accept its terms on the Hub and set HF_TOKEN").
//
// Thread safety: one HubClient may be used from several threads at once (each call opens its
// own transfer); a download is cancelled through its DownloadControl from any thread.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lan/hub/hub_types.h"

namespace shoal::lan::hub {

class HubError : public std::runtime_error {
 public:
  enum class Kind {
    Network,       // no connection, DNS, TLS, time-out, dropped transfer
    Unauthorized,  // 401/403: gated or private repository, or a bad token
    NotFound,      // 404: no such repository, revision or file
    BadReply,      // the server's answer is not what the API documents
    Integrity,     // a downloaded file's SHA-256 differs from the one the Hub publishes
    Cancelled,     // DownloadControl::cancel or pause
    Local,         // the local disk: cannot create, write or rename
  };
  HubError(Kind kind, const std::string& what, int httpStatus = 0)
      : std::runtime_error(what), m_kind(kind), m_httpStatus(httpStatus) {}
  Kind kind() const { return m_kind; }
  int httpStatus() const { return m_httpStatus; }  // 0 when no HTTP status was received

 private:
  Kind m_kind;
  int m_httpStatus;
};

struct HubOptions {
  std::string endpoint = "https://huggingface.co";  // no trailing slash
  std::string token;                                // empty: anonymous
  long connectTimeoutS = 15;
  // A transfer slower than 1 byte/s for this long is abandoned (a stalled server).
  long stallTimeoutS = 60;
  std::string userAgent = "shoal";
};

// Lets another thread stop a running download: the transfer ends with HubError::Kind::Cancelled
// and the partial file is kept, so a later download() resumes it. That is a pause; a caller whose
// user pressed Cancel calls discardPartial() afterwards.
struct DownloadControl {
  std::atomic<bool> stop{false};
  void cancel() { stop.store(true); }
};

class HubClient {
 public:
  explicit HubClient(HubOptions options);
  // HubOptions from HF_ENDPOINT and HF_TOKEN (defaults where unset).
  static HubClient fromEnvironment();

  const HubOptions& options() const { return m_options; }

  // Repositories with GGUF files whose name matches `text`, best first by `sort`.
  std::vector<RepoSummary> search(const std::string& text, SearchSort sort, int limit) const;

  // Every GGUF model of `repo` at `revision` (split parts grouped, sorted by name).
  std::vector<ModelFile> listModels(const std::string& repo,
                                    const std::string& revision = "main") const;

  // The first bytes of `file` (a Range request), enough for a GGUF header: metadata and the
  // tensor table. Returns at most `maxBytes`. A `control` that stops ends the fetch with
  // HubError::Kind::Cancelled (a page that no longer needs the answer).
  std::vector<uint8_t> fetchPrefix(const std::string& repo, const RepoFile& file, uint64_t maxBytes,
                                   const std::string& revision = "main",
                                   const DownloadControl* control = nullptr) const;

  // Downloads every part of `model` into `modelsDir`. While running, bytes go to
  // modelsDir/.partial/<file>.part with a small JSON note beside it (repo, revision, path, size,
  // sha256) so a later call — after a dropped connection or a restart of the process — resumes
  // with a Range request instead of starting again. A finished part is hashed; when the Hub
  // publishes a SHA-256 and it differs, the part is renamed to <file>.rejected in .partial (never
  // moved into modelsDir) and Integrity is thrown. Finished parts are renamed into modelsDir.
  // Returns the path of the first part in modelsDir. `progress` is called at most ~10 times a
  // second from this thread.
  std::filesystem::path download(const std::string& repo, const ModelFile& model,
                                 const std::filesystem::path& modelsDir,
                                 const std::function<void(const DownloadProgress&)>& progress,
                                 DownloadControl* control = nullptr,
                                 const std::string& revision = "main") const;

  // Removes what download() left in modelsDir/.partial for `model` (after a cancel).
  static void discardPartial(const ModelFile& model, const std::filesystem::path& modelsDir);

  // The URL a file downloads from (for messages and tests).
  std::string resolveUrl(const std::string& repo, const std::string& path,
                         const std::string& revision = "main") const;

 private:
  HubOptions m_options;
};

// File-name rules, exposed for tests: "model-00002-of-00005.gguf" -> part 2 of 5, base "model".
struct SplitName {
  std::string base;  // the path without "-0000k-of-0000n.gguf"
  int part = 0;      // 1-based; 0 when the name is not a split part
  int count = 0;
};
SplitName parseSplitName(const std::string& path);
// The quantization named in a GGUF file name ("…-Q4_K_M.gguf" -> "Q4_K_M"), upper-case; "" if
// none is recognised.
std::string quantizationFromName(const std::string& path);
// Groups the .gguf files of a tree listing into models (non-GGUF files are ignored).
std::vector<ModelFile> groupModels(const std::vector<RepoFile>& files);

}  // namespace shoal::lan::hub
