#include "lan/hub/hub_errors.h"

#include <nlohmann/json.hpp>

#include "lan/json/json_bounds.h"

namespace shoal::lan::hub {
namespace {

// The Hub's own words: X-Error-Message, else {"error": "..."} of the body.
std::string serverMessage(const ResponseHead& head, const std::string& body) {
  if (!head.errorMessage.empty()) return head.errorMessage;
  // An error body is a small object; anything else is not worth a parse (nor a stack).
  if (body.size() > kMaxErrorBodyBytes || !jsonBoundsViolation(body, JsonBounds{8, 1024}).empty()) {
    return "";
  }
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    auto it = j.find("error");
    if (it != j.end() && it->is_string()) return it->get<std::string>().substr(0, 500);
  }
  return "";
}

std::string said(const std::string& message) {
  return message.empty() ? "" : " (the server says: " + message + ")";
}

}  // namespace

void throwHttpError(const ResponseHead& head, const std::string& body,
                    const RequestSubject& subject, const HubOptions& options,
                    const std::string& url) {
  const long status = head.status;
  const std::string message = serverMessage(head, body);
  const std::string where = options.endpoint;
  const std::string revision = subject.revision.empty() ? "main" : subject.revision;
  using Kind = HubError::Kind;
  // The Hub answers 401 RepoNotFound for a repository it does not show to this caller (missing,
  // or private to someone else).
  if (head.errorCode == "RepoNotFound" ||
      (status == 404 && subject.path.empty() && head.errorCode != "RevisionNotFound")) {
    throw HubError(Kind::NotFound,
                   "repository '" + subject.repo + "' not found on " + where +
                       (options.token.empty() ? " (if it is private, set HF_TOKEN)" : ""),
                   static_cast<int>(status));
  }
  if (status == 401 || status == 403) {
    std::string text =
        "'" + subject.repo + "' is gated or private: accept the model's terms on its page, " +
        where + "/" + subject.repo + ", then set HF_TOKEN to an access token of that account";
    if (!options.token.empty()) text += " (the server refused the HF_TOKEN given)";
    throw HubError(Kind::Unauthorized, text + said(message), static_cast<int>(status));
  }
  if (status == 404) {
    if (head.errorCode == "RevisionNotFound") {
      throw HubError(Kind::NotFound, "'" + subject.repo + "' has no revision '" + revision + "'",
                     404);
    }
    throw HubError(
        Kind::NotFound,
        "'" + subject.path + "' is not in '" + subject.repo + "' at revision '" + revision + "'",
        404);
  }
  if (status == 429) {
    throw HubError(Kind::Network, "the Hub is limiting requests (HTTP 429): try again later", 429);
  }
  if (status >= 500) {
    throw HubError(
        Kind::Network,
        "the server answered HTTP " + std::to_string(status) + " for " + url + said(message),
        static_cast<int>(status));
  }
  throw HubError(Kind::BadReply,
                 "unexpected HTTP " + std::to_string(status) + " for " + url + said(message),
                 static_cast<int>(status));
}

void throwTransferError(CURLcode code, const CurlRequest& request, const std::string& context) {
  throw HubError(HubError::Kind::Network,
                 context + ": " + request.errorText(code) + " (" + request.url() + ")");
}

}  // namespace shoal::lan::hub
