#include "engine/model/architecture.h"

#include "engine/error.h"
#include "engine/model/model_config.h"

namespace shoal::model {

// Defined in the generated arch_registry.cpp.
const std::vector<const Architecture*>& registeredArchitectures();

const Architecture* findArchitecture(std::string_view name) {
  for (const Architecture* a : registeredArchitectures()) {
    for (std::string_view n : a->names) {
      if (n == name) return a;
    }
  }
  return nullptr;
}

std::vector<std::string_view> supportedArchitectureNames() {
  std::vector<std::string_view> names;
  for (const Architecture* a : registeredArchitectures()) {
    names.insert(names.end(), a->names.begin(), a->names.end());
  }
  return names;
}

const Architecture& architectureOf(const ModelConfig& config) {
  if (config.arch) return *config.arch;
  if (const Architecture* a = findArchitecture(config.architecture)) return *a;
  throw Error("unsupported architecture '" + config.architecture + "'");
}

}  // namespace shoal::model
