#include "kernels/cuda/cuda_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "engine/error.h"
#include "kernels/cuda/cuda_plugin_abi.h"

namespace shoal::cuda {
namespace {

namespace fs = std::filesystem;

// Stands in for the CUDA backend when the plugin cannot be used: no devices, a reason.
class UnavailableBackend final : public runtime::Backend {
 public:
  explicit UnavailableBackend(std::string reason) : m_reason(std::move(reason)) {}
  std::string name() const override { return "cuda"; }
  runtime::Availability availability() const override { return {false, m_reason}; }
  std::vector<runtime::DeviceInfo> devices() const override { return {}; }
  std::unique_ptr<runtime::Stage> createStage(const std::string&, const runtime::ModelSource&,
                                              const runtime::StageSpec&) override {
    throw Error("cuda backend unavailable: " + m_reason);
  }

 private:
  std::string m_reason;
};

fs::path executableDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

std::vector<std::string> pluginCandidates() {
  if (const char* env = std::getenv("SHOAL_CUDA_PLUGIN"); env && *env) return {env};
  std::vector<std::string> out;
  if (const fs::path dir = executableDir(); !dir.empty()) {
    out.push_back((dir / kPluginFileName).string());
    out.push_back((dir / ".." / "lib" / "shoal" / kPluginFileName).lexically_normal().string());
  }
#ifdef SHOAL_CUDA_PLUGIN_BUILD_DIR
  out.push_back((fs::path(SHOAL_CUDA_PLUGIN_BUILD_DIR) / kPluginFileName).string());
#endif
  return out;
}

std::unique_ptr<runtime::Backend> loadCudaBackend(uint64_t memoryLimit) {
  const std::vector<std::string> candidates = pluginCandidates();
  std::string tried;
  for (const std::string& path : candidates) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    // RTLD_LOCAL: the plugin's symbols (its static CUDA runtime included) stay private to it.
    // The handle is never closed: the CUDA runtime inside registers exit handlers and static
    // destructors that must still find their code when the process ends.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* err = dlerror();
      return std::make_unique<UnavailableBackend>("cannot load " + path + ": " +
                                                  (err ? err : "unknown dlopen error"));
    }
    auto abi = reinterpret_cast<PluginAbiFn>(dlsym(handle, kAbiSymbol));
    auto create = reinterpret_cast<CreateBackendFn>(dlsym(handle, kCreateSymbol));
    if (!abi || !create) {
      return std::make_unique<UnavailableBackend>(path + " is not a Shoal CUDA plugin (no " +
                                                  kAbiSymbol + "/" + kCreateSymbol + ")");
    }
    if (const int got = abi(); got != kShoalCudaPluginAbi) {
      return std::make_unique<UnavailableBackend>(
          path + " has plugin ABI " + std::to_string(got) + ", this Shoal expects " +
          std::to_string(kShoalCudaPluginAbi) + " (rebuild the plugin with this Shoal)");
    }
    runtime::Backend* backend = create(kShoalCudaPluginAbi, memoryLimit);
    if (!backend)
      return std::make_unique<UnavailableBackend>(path + " refused to create a backend");
    return std::unique_ptr<runtime::Backend>(backend);
  }
  return std::make_unique<UnavailableBackend>(
      std::string(kPluginFileName) +
      " not found (looked in: " + (tried.empty() ? std::string("nowhere") : tried) +
      "; set SHOAL_CUDA_PLUGIN or build with -DSHOAL_CUDA=ON)");
}

}  // namespace shoal::cuda
