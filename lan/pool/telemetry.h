#pragma once
// A snapshot of a pool's live state, taken every 500 ms by the coordinator: what the GUI's pool
// view draws and `shoal-cli pool status --json` prints. Plain data + JSON conversion; no I/O.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace shoal::lan {

struct DeviceTelemetry {
  std::string nodeId;        // device ID of the node (identity.h) that hosts the device
  std::string nodeName;      // the node's display name
  std::string deviceId;      // backend device id on that node: "cpu0", "vulkan0", "cuda0"
  std::string deviceName;    // human-readable device name
  std::string backend;       // "cpu", "vulkan", "cuda"
  double busyFraction = 0;   // 0..1, share of the last interval spent computing
  uint64_t memoryUsed = 0;   // bytes
  uint64_t memoryTotal = 0;  // bytes
  double tokensPerS = 0;     // tokens through this device's stage in the last interval
  int32_t queueDepth = 0;    // requests waiting for this stage
  int32_t firstLayer = -1;   // layer range it holds [firstLayer, lastLayer); -1 when none
  int32_t lastLayer = -1;
};

struct LinkTelemetry {
  std::string fromNodeId;  // device IDs of the two nodes
  std::string toNodeId;
  double rttMs = 0;               // last measured round trip
  double bandwidthBytesPerS = 0;  // last measured, 0 when not measured
  // The first node sends its hidden states straight to the second (direct forwarding); false:
  // they travel through the coordinator (rttMs is that relayed path's).
  bool direct = false;
};

struct PoolSnapshot {
  int64_t unixMs = 0;     // when the snapshot was taken
  std::string modelName;  // empty when no model is deployed
  int32_t modelLayers = 0;
  double predictedTokensPerS = 0;  // the planner's figure for the current plan
  std::vector<DeviceTelemetry> devices;
  std::vector<LinkTelemetry> links;  // between consecutive stages' nodes
};

// JSON field names are the member names; missing fields keep their defaults.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DeviceTelemetry, nodeId, nodeName, deviceId,
                                                deviceName, backend, busyFraction, memoryUsed,
                                                memoryTotal, tokensPerS, queueDepth, firstLayer,
                                                lastLayer)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LinkTelemetry, fromNodeId, toNodeId, rttMs,
                                                bandwidthBytesPerS, direct)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PoolSnapshot, unixMs, modelName, modelLayers,
                                                predictedTokensPerS, devices, links)

}  // namespace shoal::lan
