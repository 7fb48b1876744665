#include "lan/hub/header_fit.h"

#include <exception>

#include "engine/gguf/gguf_file.h"

namespace shoal::lan::hub {
namespace {

// Most headers (metadata + tensor table) are well under 4 MiB; a few with huge vocabularies or
// many tensors need more. Beyond 32 MiB something is off, and a download is the better test.
constexpr uint64_t kFirstPrefixBytes = uint64_t{4} << 20;
constexpr uint64_t kLargestPrefixBytes = uint64_t{32} << 20;

}  // namespace

HeaderFit estimateHeaderFit(const HubClient& client, const std::string& repo,
                            const ModelFile& model, const std::vector<plan::Pool>& pools,
                            int64_t contextTokens, const std::string& revision,
                            const DownloadControl* control) {
  HeaderFit out;
  if (model.parts.empty()) {
    out.error = "the repository lists no file for this model";
    return out;
  }
  const RepoFile& first = model.parts.front();
  try {
    for (const uint64_t want : {kFirstPrefixBytes, kLargestPrefixBytes}) {
      const std::vector<uint8_t> prefix = client.fetchPrefix(repo, first, want, revision, control);
      try {
        // The File points into `prefix`: estimate while both live.
        const gguf::File header = gguf::File::fromHeader(prefix, first.size, first.path);
        for (const plan::Pool& pool : pools) {
          out.estimates.push_back(plan::estimateFit(header, pool, contextTokens));
        }
        return out;
      } catch (const gguf::HeaderIncomplete&) {
        if (want == kLargestPrefixBytes || prefix.size() < want) {
          out.error = "its GGUF header is larger than " +
                      plan::formatBytes(static_cast<double>(kLargestPrefixBytes)) +
                      " (or the file is cut short)";
          return out;
        }
      }
    }
  } catch (const HubError& e) {
    out.error = e.what();
  } catch (const std::exception& e) {
    out.error = std::string("not a readable GGUF header: ") + e.what();
  }
  return out;
}

}  // namespace shoal::lan::hub
