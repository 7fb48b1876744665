#include "lan/hub/curl_request.h"

#include <algorithm>
#include <cctype>
#include <mutex>

namespace shoal::lan::hub {
namespace {

// curl_global_init is not thread-safe in every libcurl; do it once, before the first handle.
void globalInit() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw HubError(HubError::Kind::Network, "libcurl could not initialise");
    }
  });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The URL of the rel="next" entry of a Link header ("<url>; rel=\"next\", <...>; rel=...").
std::string nextLink(const std::string& value) {
  size_t pos = 0;
  while (pos < value.size()) {
    size_t open = value.find('<', pos);
    if (open == std::string::npos) break;
    size_t close = value.find('>', open);
    if (close == std::string::npos) break;
    size_t end = value.find(',', close);
    std::string params = lower(
        value.substr(close + 1, end == std::string::npos ? std::string::npos : end - close - 1));
    if (params.find("rel=\"next\"") != std::string::npos ||
        params.find("rel=next") != std::string::npos) {
      return value.substr(open + 1, close - open - 1);
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return "";
}

}  // namespace

CurlRequest::CurlRequest(const HubOptions& options, const std::string& url) : m_url(url) {
  globalInit();
  m_curl = curl_easy_init();
  if (!m_curl) throw HubError(HubError::Kind::Network, "libcurl could not start a transfer");
  curl_easy_setopt(m_curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(m_curl, CURLOPT_ERRORBUFFER, m_error);
  curl_easy_setopt(m_curl, CURLOPT_NOSIGNAL, 1L);  // several threads: no SIGALRM for DNS
  curl_easy_setopt(m_curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(m_curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(m_curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(m_curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(m_curl, CURLOPT_CONNECTTIMEOUT, options.connectTimeoutS);
  // A stalled server: under 1 byte/s for stallTimeoutS seconds ends the transfer.
  curl_easy_setopt(m_curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(m_curl, CURLOPT_LOW_SPEED_TIME, options.stallTimeoutS);
  curl_easy_setopt(m_curl, CURLOPT_USERAGENT, options.userAgent.c_str());
  if (!options.token.empty()) {
    // Sent to the first URL's host only: without CURLOPT_UNRESTRICTED_AUTH libcurl does not
    // pass credentials on to another host a redirect names.
    curl_easy_setopt(m_curl, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BEARER));
    curl_easy_setopt(m_curl, CURLOPT_XOAUTH2_BEARER, options.token.c_str());
  }
  curl_easy_setopt(m_curl, CURLOPT_HEADERFUNCTION, &CurlRequest::headerCallback);
  curl_easy_setopt(m_curl, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(m_curl, CURLOPT_WRITEFUNCTION, &CurlRequest::writeCallback);
  curl_easy_setopt(m_curl, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(m_curl, CURLOPT_XFERINFOFUNCTION, &CurlRequest::xferCallback);
  curl_easy_setopt(m_curl, CURLOPT_XFERINFODATA, this);
  curl_easy_setopt(m_curl, CURLOPT_NOPROGRESS, 0L);
}

CurlRequest::~CurlRequest() {
  curl_easy_cleanup(m_curl);
  curl_slist_free_all(m_headers);
}

void CurlRequest::setRange(uint64_t first, std::optional<uint64_t> last) {
  std::string range = std::to_string(first) + "-" + (last ? std::to_string(*last) : "");
  // CURLOPT_RANGE copies the string.
  curl_easy_setopt(m_curl, CURLOPT_RANGE, range.c_str());
}

void CurlRequest::acceptCompression() { curl_easy_setopt(m_curl, CURLOPT_ACCEPT_ENCODING, ""); }

CURLcode CurlRequest::perform() {
  m_head = {};
  return curl_easy_perform(m_curl);
}

std::string CurlRequest::errorText(CURLcode code) const {
  return m_error[0] ? std::string(m_error) : std::string(curl_easy_strerror(code));
}

size_t CurlRequest::headerCallback(char* data, size_t size, size_t count, void* self) {
  auto* r = static_cast<CurlRequest*>(self);
  const size_t n = size * count;
  std::string line(data, n);
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response (the first, or the one after a redirect): forget the previous head.
    r->m_head = {};
    size_t sp = line.find(' ');
    if (sp != std::string::npos) r->m_head.status = std::strtol(line.c_str() + sp + 1, nullptr, 10);
    return n;
  }
  if (trim(line).empty()) {
    r->m_head.complete = true;
    return n;
  }
  size_t colon = line.find(':');
  if (colon == std::string::npos) return n;
  const std::string name = lower(trim(line.substr(0, colon)));
  const std::string value = trim(line.substr(colon + 1));
  if (name == "content-range") r->m_head.contentRange = value;
  if (name == "x-error-code") r->m_head.errorCode = value.substr(0, 100);
  if (name == "x-error-message") r->m_head.errorMessage = value.substr(0, 500);
  if (name == "link") r->m_head.linkNext = nextLink(value);
  return n;
}

size_t CurlRequest::writeCallback(char* data, size_t size, size_t count, void* self) {
  auto* r = static_cast<CurlRequest*>(self);
  const size_t n = size * count;
  if (!r->m_sink) return n;
  const auto* bytes = reinterpret_cast<const uint8_t*>(data);
  return r->m_sink(r->m_head, std::span<const uint8_t>(bytes, n)) ? n : 0;
}

int CurlRequest::xferCallback(void* self, curl_off_t dltotal, curl_off_t dlnow, curl_off_t,
                              curl_off_t) {
  auto* r = static_cast<CurlRequest*>(self);
  if (!r->m_progress) return 0;
  const auto received = static_cast<uint64_t>(std::max<curl_off_t>(dlnow, 0));
  const auto expected = static_cast<uint64_t>(std::max<curl_off_t>(dltotal, 0));
  return r->m_progress(received, expected) ? 0 : 1;
}

std::string urlEscape(const std::string& text) {
  std::string out;
  static const char* hex = "0123456789ABCDEF";
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace shoal::lan::hub
