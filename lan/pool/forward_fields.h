#pragma once
// Fields of the node protocol's forward request that both sides spell: NodeClient writes them,
// NodeHost reads them (header-only, so neither side can drift from the other).

#include <optional>
#include <string_view>

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

}  // namespace shoal::lan
