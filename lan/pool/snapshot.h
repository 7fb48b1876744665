#pragma once
// Aggregates what the telemetry poll gathered (each node's `telemetry` reply and the
// coordinator's link measurements) into one PoolSnapshot (telemetry.h). Pure: no I/O.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lan/pool/node_info.h"
#include "lan/pool/pool_builder.h"
#include "lan/pool/telemetry.h"

namespace shoal::lan {

// One node's part of a poll.
struct NodeReport {
  NodeInfo info;         // from node_info (names, devices when the poll failed)
  bool replied = false;  // false: the node did not answer this poll (its devices show idle)
  std::vector<DeviceTelemetry> devices;  // its telemetry reply
  double rttS = 0;                       // coordinator <-> node, last measured (0: unknown)
  double bandwidthBytesPerS = 0;         // last measured (0: unknown)
};

// The devices of a `telemetry` reply. Throws shoal::Error naming the field when "devices" is
// missing or not an array of objects, or a number in it is negative or not finite.
std::vector<DeviceTelemetry> parseTelemetryReply(const nlohmann::json& reply);

struct SnapshotContext {
  int64_t unixMs = 0;
  std::string modelName;  // empty: nothing deployed
  int32_t modelLayers = 0;
  double predictedTokensPerS = 0;
  std::vector<StagePlacement> stages;  // deployed pipeline, in order (may be empty)
  std::vector<bool> directHops;        // per hop stage i -> i + 1: node to node (else relayed)
};

// Every device of every node, with the node's verified id and name (the coordinator's, not
// what the reply claims) and the layer range the deployed pipeline gives it; one link per hop
// between consecutive stages on different nodes (the relayed path: round trip rttA + rttB,
// bandwidth the smaller of the two), marked direct where the hop is node to node.
PoolSnapshot buildSnapshot(const SnapshotContext& context, const std::vector<NodeReport>& nodes);

}  // namespace shoal::lan
