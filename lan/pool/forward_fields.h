#pragma once
// Fields of the node protocol's forward request that both sides spell: NodeClient writes them,
// NodeHost reads them (header-only, so neither side can drift from the other).

#include <optional>
#include <string_view>

#include "engine/error.h"
#include "engine/runtime/stage.h"

namespace shoal::lan {

// "logits" of a forward request: which rows of the segment return logits on the head stage.
inline const char* logitRowsName(runtime::LogitRows rows) {
  switch (rows) {
    case runtime::LogitRows::None:
      return "none";
    case runtime::LogitRows::Last:
      return "last";
    case runtime::LogitRows::All:
      return "all";
  }
  return "last";
}

// nullopt for a name that is none of logitRowsName's.
inline std::optional<runtime::LogitRows> parseLogitRows(std::string_view name) {
  if (name == "none") return runtime::LogitRows::None;
  if (name == "last") return runtime::LogitRows::Last;
  if (name == "all") return runtime::LogitRows::All;
  return std::nullopt;
}

// A forward that failed because of direct forwarding's link (lan/node/stage_links.h): the next
// node unreachable, the previous one gone, a wait for its rows timed out, rows out of step. The
// node's error reply says so ("link_failed": true) and NodeClient rethrows it as this type, so
// that the coordinator falls back to relaying instead of treating it as the request's fault.
class LinkFailure : public Error {
 public:
  using Error::Error;
};

}  // namespace shoal::lan
