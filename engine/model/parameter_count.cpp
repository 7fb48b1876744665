#include "engine/model/parameter_count.h"

#include <string_view>

#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"

namespace shoal::model {

ParameterCount countParameters(const gguf::File& file, const ModelConfig& config) {
  ParameterCount p;
  int64_t experts = 0;  // elements of the stacked expert tensors
  for (const gguf::TensorInfo& t : file.tensors()) {
    p.total += t.elementCount();
    if (std::string_view(t.name).find("_exps.") != std::string_view::npos) {
      experts += t.elementCount();
    }
  }
  p.active = p.total;
  if (config.nExpert > 0 && experts > 0) {
    p.active = p.total - experts + experts / config.nExpert * config.nExpertUsed;
  }
  return p;
}

}  // namespace shoal::model
