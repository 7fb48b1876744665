#pragma once
// HubError for a failed transfer or an HTTP error status, worded for the person who reads it.
// Internal to lan/hub.

#include <string>

#include "lan/hub/curl_request.h"

namespace shoal::lan::hub {

// How much of an error reply's body is kept (and read for the server's message): the Hub's are a
// line of JSON; a hostile server's megabytes are not worth holding.
inline constexpr size_t kMaxErrorBodyBytes = 64 * 1024;

// What the request was for, to name it in the message.
struct RequestSubject {
  std::string repo;      // "owner/name"
  std::string revision;  // "" when the request names none
  std::string path;      // a file of the repo, "" for a listing or search
};

// The response `head` (status ≥ 300) as a HubError: Unauthorized for 401/403 (gated or private:
// what to do about it, naming HF_TOKEN), NotFound for 404 (and the Hub's 401 "RepoNotFound"),
// Network for 429 and 5xx, BadReply for anything else. `body` is the (start of the) error body.
[[noreturn]] void throwHttpError(const ResponseHead& head, const std::string& body,
                                 const RequestSubject& subject, const HubOptions& options,
                                 const std::string& url);

// A perform() that failed below HTTP (DNS, connect, TLS, time-out, dropped) as HubError(Network).
[[noreturn]] void throwTransferError(CURLcode code, const CurlRequest& request,
                                     const std::string& context);

}  // namespace shoal::lan::hub
