#pragma once
// One HTTP transfer over libcurl (RAII around a CURL easy handle), with the options every Hub
// request shares: redirects followed (http/https only), connect and stall time-outs, the user
// agent and the token. Internal to lan/hub.
//
// The token goes through CURLOPT_XOAUTH2_BEARER with CURLAUTH_BEARER rather than a hand-written
// "Authorization" header: libcurl then sends it only to the host of the first URL and drops it
// when a redirect leads elsewhere (the Hub's CDN), unlike a custom header, which it would repeat.
//
// Proxies: nothing to do here. libcurl itself reads http_proxy, https_proxy (HTTPS_PROXY),
// all_proxy and no_proxy from the environment, which is what a desktop's "system proxy" is on
// Linux.

#include <curl/curl.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "lan/hub/hub_client.h"

namespace shoal::lan::hub {

// The head of the final response (after redirects).
struct ResponseHead {
  long status = 0;           // 0 until a status line arrived
  std::string contentRange;  // "bytes 100-199/1000" or ""
  std::string errorCode;     // X-Error-Code: "GatedRepo", "RepoNotFound", "EntryNotFound", ...
  std::string errorMessage;  // X-Error-Message
  std::string linkNext;      // the URL of Link: <...>; rel="next" (paginated listings)
  bool complete = false;     // the blank line after the headers arrived
};

class CurlRequest {
 public:
  CurlRequest(const HubOptions& options, const std::string& url);
  ~CurlRequest();
  CurlRequest(const CurlRequest&) = delete;
  CurlRequest& operator=(const CurlRequest&) = delete;

  // "Range: bytes=first-" or "bytes=first-last".
  void setRange(uint64_t first, std::optional<uint64_t> last = std::nullopt);
  // Lets the server compress (JSON listings; never for file bytes, whose ranges count raw bytes).
  void acceptCompression();

  // Receives the final response's body in chunks, once its head is complete; returns false to
  // stop the transfer (perform() then returns CURLE_WRITE_ERROR).
  using BodySink = std::function<bool(const ResponseHead& head, std::span<const uint8_t> bytes)>;
  void onBody(BodySink sink) { m_sink = std::move(sink); }
  // Called often during the transfer with the bytes received of this response's body and its
  // length (0 when unknown); returns false to stop (perform() returns CURLE_ABORTED_BY_CALLBACK).
  using ProgressSink = std::function<bool(uint64_t received, uint64_t expected)>;
  void onProgress(ProgressSink sink) { m_progress = std::move(sink); }

  CURLcode perform();
  const ResponseHead& head() const { return m_head; }
  // libcurl's description of a failed perform(): its error buffer or curl_easy_strerror.
  std::string errorText(CURLcode code) const;
  const std::string& url() const { return m_url; }

 private:
  static size_t headerCallback(char* data, size_t size, size_t count, void* self);
  static size_t writeCallback(char* data, size_t size, size_t count, void* self);
  static int xferCallback(void* self, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                          curl_off_t ulnow);

  CURL* m_curl = nullptr;
  curl_slist* m_headers = nullptr;
  std::string m_url;
  ResponseHead m_head;
  BodySink m_sink;
  ProgressSink m_progress;
  char m_error[CURL_ERROR_SIZE] = {};
};

// Percent-encodes `text` for a URL query value or one path segment.
std::string urlEscape(const std::string& text);

}  // namespace shoal::lan::hub
