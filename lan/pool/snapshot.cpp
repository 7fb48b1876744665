#include "lan/pool/snapshot.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"

namespace shoal::lan {

std::vector<DeviceTelemetry> parseTelemetryReply(const nlohmann::json& reply) {
  if (!reply.is_object()) throw Error("telemetry: not a JSON object");
  const auto it = reply.find("devices");
  if (it == reply.end() || !it->is_array())
    throw Error("telemetry.devices: missing or not an array");
  std::vector<DeviceTelemetry> out;
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string at = "telemetry.devices[" + std::to_string(i) + "]";
    const nlohmann::json& d = (*it)[i];
    if (!d.is_object()) throw Error(at + ": must be an object");
    DeviceTelemetry t;
    try {
      t = d.get<DeviceTelemetry>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(at + ": " + e.what());
    }
    if (!std::isfinite(t.busyFraction) || t.busyFraction < 0 || !std::isfinite(t.tokensPerS) ||
        t.tokensPerS < 0 || t.queueDepth < 0) {
      throw Error(at + ": busyFraction, tokensPerS and queueDepth must be finite and >= 0");
    }
    t.busyFraction = std::min(t.busyFraction, 1.0);
    out.push_back(std::move(t));
  }
  return out;
}

PoolSnapshot buildSnapshot(const SnapshotContext& context, const std::vector<NodeReport>& nodes) {
  PoolSnapshot snap;
  snap.unixMs = context.unixMs;
  snap.modelName = context.modelName;
  snap.modelLayers = context.modelLayers;
  snap.predictedTokensPerS = context.predictedTokensPerS;

  auto placementOf = [&](const std::string& node, const std::string& device) {
    for (const StagePlacement& s : context.stages) {
      if (s.nodeId == node && s.deviceId == device) return &s;
    }
    return static_cast<const StagePlacement*>(nullptr);
  };

  for (const NodeReport& n : nodes) {
    std::vector<DeviceTelemetry> devices;
    if (n.replied) devices = n.devices;
    // Devices node_info listed that the reply left out (or every one when it did not reply)
    // still appear, idle, so the GUI's view does not flicker.
    for (const NodeDevice& d : n.info.devices) {
      const bool reported =
          std::any_of(devices.begin(), devices.end(),
                      [&](const DeviceTelemetry& t) { return t.deviceId == d.id; });
      if (reported) continue;
      DeviceTelemetry t;
      t.deviceId = d.id;
      t.deviceName = d.name;
      t.backend = d.backend;
      t.memoryTotal = d.memoryTotal;
      t.memoryUsed = d.memoryTotal - d.memoryFree;
      devices.push_back(std::move(t));
    }
    for (DeviceTelemetry& t : devices) {
      t.nodeId = n.info.deviceId;
      t.nodeName = n.info.name;
      const StagePlacement* s = placementOf(n.info.deviceId, t.deviceId);
      t.firstLayer = s ? s->firstLayer : -1;
      t.lastLayer = s ? s->lastLayer : -1;
      snap.devices.push_back(std::move(t));
    }
  }

  auto reportOf = [&](const std::string& node) {
    for (const NodeReport& n : nodes) {
      if (n.info.deviceId == node) return &n;
    }
    return static_cast<const NodeReport*>(nullptr);
  };
  for (size_t i = 1; i < context.stages.size(); ++i) {
    const std::string& from = context.stages[i - 1].nodeId;
    const std::string& to = context.stages[i].nodeId;
    if (from == to) continue;
    LinkTelemetry link;
    link.fromNodeId = from;
    link.toNodeId = to;
    link.direct = i - 1 < context.directHops.size() && context.directHops[i - 1];
    const NodeReport* a = reportOf(from);
    const NodeReport* b = reportOf(to);
    if (a && b && a->rttS > 0 && b->rttS > 0) link.rttMs = (a->rttS + b->rttS) * 1e3;
    if (a && b && a->bandwidthBytesPerS > 0 && b->bandwidthBytesPerS > 0) {
      link.bandwidthBytesPerS = std::min(a->bandwidthBytesPerS, b->bandwidthBytesPerS);
    }
    snap.links.push_back(std::move(link));
  }
  return snap;
}

}  // namespace shoal::lan
