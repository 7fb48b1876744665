#pragma once
// Reading what a Hub (or a mirror, or anything HF_ENDPOINT points at) answers. The server is
// untrusted input: every field's type is checked, sizes are bounded, and a file path that could
// lead outside the models directory is refused. Exposed for tests and the fuzz target.

#include <string>
#include <vector>

#include "lan/hub/hub_client.h"

namespace shoal::lan::hub {

// The largest file size believed (1 PiB): a larger "size" is a bad reply, not a download.
inline constexpr uint64_t kMaxFileBytes = uint64_t{1} << 50;

// GET /api/models: a JSON array of repositories. Throws HubError(BadReply).
std::vector<RepoSummary> parseSearchReply(const std::string& body);
// GET /api/models/{repo}/tree/{revision}: a JSON array of entries; directories are skipped.
// Throws HubError(BadReply) for a wrong type, a size out of range, a malformed sha256 or an
// unsafe path (isSafeRepoPath).
std::vector<RepoFile> parseTreeReply(const std::string& body);

// A relative '/'-separated path with no "..", ".", or empty segment, no leading '/', no
// backslash, no control character and no segment starting with '.' (".partial" is ours).
bool isSafeRepoPath(const std::string& path);
// "owner/name": one '/', each side [A-Za-z0-9._-], neither "." nor "..".
bool isValidRepoId(const std::string& repo);

}  // namespace shoal::lan::hub
