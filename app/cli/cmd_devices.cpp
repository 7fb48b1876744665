// shoal-cli devices: every device of every backend this build knows, with its id (what
// --backend/--device take) or, for a backend that cannot run here, the reason.

#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "kernels/backend_registry.h"

namespace shoal::cli {
namespace {

void runDevices(bool json) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const std::string& name : kernels::backendNames()) {
    kernels::BackendOptions options;
    const auto backend = kernels::createBackend(name, options);
    const runtime::Availability a = backend->availability();
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const runtime::DeviceInfo& d : backend->devices()) {
      nlohmann::ordered_json details = nlohmann::ordered_json::object();
      for (const auto& [key, value] : d.details) details[key] = value;
      devices.push_back({{"id", d.id},
                         {"name", d.name},
                         {"type", d.type},
                         {"memory_total", d.memoryTotal},
                         {"memory_free", d.memoryFree},
                         {"details", details}});
    }
    out.push_back({{"backend", name},
                   {"available", a.available},
                   {"reason", a.reason},
                   {"devices", devices}});
  }
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  for (const auto& b : out) {
    const std::string name = b["backend"].get<std::string>();
    if (!b["available"].get<bool>()) {
      std::printf("%-7s unavailable: %s\n", name.c_str(), b["reason"].get<std::string>().c_str());
      continue;
    }
    for (const auto& d : b["devices"]) {
      std::printf("%-7s %-10s %-15s %8.1f GiB  %s\n", name.c_str(),
                  d["id"].get<std::string>().c_str(), d["type"].get<std::string>().c_str(),
                  static_cast<double>(d["memory_total"].get<uint64_t>()) / (1 << 30),
                  d["name"].get<std::string>().c_str());
      for (const auto& [key, value] : d["details"].items()) {
        std::printf("%-7s %-10s   %s: %s\n", "", "", key.c_str(), value.get<std::string>().c_str());
      }
    }
  }
}

}  // namespace

void registerDevicesCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the devices of every backend and their ids");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json] { runDevices(*json); });
}

}  // namespace shoal::cli
