// libFuzzer target for the Hub client's reply parsing (lan/hub/hub_parse.h): the search result
// and the tree listing a Hub, a mirror (HF_ENDPOINT) or anything on the path may send, and the
// file-name rules applied to the paths it lists. Any input either parses or is refused with
// HubError(BadReply); a parsed path is always safe to join to the models folder; never a crash,
// an over-read or another exception.
//
//   ./build-fuzz/tests/fuzz/fuzz_hub_reply -max_total_time=60 tests/fuzz/corpus/hub_reply

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lan/hub/hub_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::lan::hub;
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    for (const RepoSummary& r : parseSearchReply(body)) {
      if (!isValidRepoId(r.id)) std::abort();
    }
  } catch (const HubError& e) {
    if (e.kind() != HubError::Kind::BadReply) std::abort();
  }
  try {
    const std::vector<RepoFile> files = parseTreeReply(body);
    for (const RepoFile& f : files) {
      if (!isSafeRepoPath(f.path) || f.size > kMaxFileBytes) std::abort();
      (void)parseSplitName(f.path);
      (void)quantizationFromName(f.path);
    }
    for (const ModelFile& m : groupModels(files)) {
      if (m.parts.empty()) std::abort();
    }
  } catch (const HubError& e) {
    if (e.kind() != HubError::Kind::BadReply) std::abort();
  }
  return 0;
}
