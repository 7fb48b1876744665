// harmony_tools.h in a build without nlohmann_json (the engine-only build of a GPU machine,
// which serves no chat API).
#include "engine/error.h"
#include "engine/model/harmony_tools.h"

namespace shoal::model {

std::string harmonyToolNamespace(const std::vector<std::string>&) {
  throw Error(
      "chat format harmony: tools need a build with nlohmann_json (this is an engine-only "
      "build)");
}

}  // namespace shoal::model
