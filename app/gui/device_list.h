#pragma once
// This machine's compute backends as the settings dialog and the pool page show them: each
// backend of the registry, whether it is available (and why not), and its devices.

#include <QList>
#include <QString>
#include <vector>

#include "engine/runtime/backend.h"

namespace shoal::gui {

struct BackendStatus {
  QString name;  // "cpu", "vulkan", "cuda"
  bool available = false;
  QString reason;  // why it is unavailable; empty when available
  std::vector<runtime::DeviceInfo> devices;
};

// Asks every backend of the registry (creating a backend can take a moment: a GPU driver is
// loaded). Never throws: a backend that fails to start is reported unavailable with the error.
QList<BackendStatus> probeBackends();

}  // namespace shoal::gui
