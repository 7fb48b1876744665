#pragma once
// What the pool controller (pool_controller.h) reports to the pool page, as Qt metatypes so it
// can travel in queued signals from the controller's threads to the GUI thread: telemetry
// snapshots (lan/pool/telemetry.h), nodes heard on the LAN, and the plan the user may deploy.

#include <QList>
#include <QMetaType>
#include <QString>

#include "lan/pool/telemetry.h"

namespace shoal::gui {

// A node announcing itself on the LAN (discovery), whether or not we trust it yet.
struct DiscoveredNode {
  QString deviceId;
  QString name;
  QString address;  // "host:port" to connect or pair to; empty when it gave no usable address
  QString summary;  // its devices in one line, as it announces them
  bool trusted = false;
};

// One stage of a plan preview.
struct PlanStagePreview {
  QString nodeId;
  QString nodeName;
  QString deviceId;    // backend device on the node
  int firstLayer = 0;  // [firstLayer, lastLayer)
  int lastLayer = 0;
  bool hasEmbedding = false;
  bool hasHead = false;
};

// The pipeline the coordinator would deploy, shown before the user applies it.
struct PlanPreview {
  bool feasible = false;
  QString reason;  // why not, when infeasible
  QString modelName;
  int modelLayers = 0;
  double tokensPerS = 0;  // the planner's prediction
  double latencyMs = 0;   // one token through the whole pipeline
  QList<PlanStagePreview> stages;
};

// Weight transfer of one deployment, stage by stage.
struct DeployStatus {
  int stage = 0;  // 0-based, of `stages`
  int stages = 0;
  QString nodeName;
  qint64 bytesSent = 0;  // this stage's weights streamed so far
  qint64 bytesTotal = 0;
  bool stageDone = false;
};

}  // namespace shoal::gui

Q_DECLARE_METATYPE(shoal::lan::PoolSnapshot)
Q_DECLARE_METATYPE(shoal::gui::DiscoveredNode)
Q_DECLARE_METATYPE(shoal::gui::PlanPreview)
Q_DECLARE_METATYPE(shoal::gui::DeployStatus)
