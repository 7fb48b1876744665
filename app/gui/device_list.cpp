#include "app/gui/device_list.h"

#include <exception>

#include "kernels/backend_registry.h"

namespace shoal::gui {

QList<BackendStatus> probeBackends() {
  QList<BackendStatus> out;
  for (const std::string& name : kernels::backendNames()) {
    BackendStatus s;
    s.name = QString::fromStdString(name);
    try {
      const auto backend = kernels::createBackend(name, kernels::BackendOptions{});
      const runtime::Availability a = backend->availability();
      s.available = a.available;
      s.reason = QString::fromStdString(a.reason);
      if (a.available) s.devices = backend->devices();
    } catch (const std::exception& e) {
      s.reason = QString::fromStdString(e.what());
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace shoal::gui
