#pragma once
// What a pool member says about itself in its `node_info` reply (docs: the node protocol in the
// LAN design): its name, device ID, compute devices and the model files it holds. Parsed and
// validated here, because every number in it comes from the network.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace shoal::lan {

struct NodeDevice {
  std::string id;       // backend device id on the node: "cpu0", "cuda0", ...
  std::string backend;  // "cpu", "vulkan", "cuda"
  std::string name;     // human-readable
  std::string type;     // "cpu", "discrete-gpu", ...
  uint64_t memoryTotal = 0;
  uint64_t memoryFree = 0;
  double bandwidthBytesPerS = 0;  // 0: not profiled on the node
  double flopsPerS = 0;           // 0: not profiled on the node
};

struct NodeModel {
  std::string file;    // file name on the node
  std::string sha256;  // lowercase hex of the whole file
  uint64_t size = 0;
};

// A node sends at most a few warnings (NodeService keeps 4); more is a broken or hostile node.
inline constexpr size_t kMaxNodeInfoWarnings = 16;
// One warning names an endpoint, a device ID and a path: a few hundred bytes.
inline constexpr size_t kMaxNodeInfoWarningBytes = 1024;

// A stage of the asking coordinator's whose node sends its hidden states straight to the next
// stage's node (direct forwarding, lan/node/stage_links.h); optional "links" of the reply.
struct NodeForward {
  std::string stageId;  // as the coordinator named it (JSON text of a non-string id)
  int32_t firstLayer = 0;
  int32_t lastLayer = 0;
  std::string toDevice;  // the next node's device ID
  std::string address;   // where this node reached it
  bool open = false;     // the link is up
};
// A node holds at most kMaxStagesPerPeer (32) stages of one coordinator; more is a broken node.
inline constexpr size_t kMaxNodeInfoLinks = 64;

// A weight shard the asking coordinator streamed to the node before, still in its shard cache
// (lan/node/shard_cache.h): loading that exact range again streams nothing. Optional "shards".
struct CachedShard {
  std::string model;  // the model's SHA-256 (hex)
  int32_t firstLayer = 0;
  int32_t lastLayer = 0;  // exclusive
};
inline constexpr size_t kMaxNodeInfoShards = 256;

// A forward may carry "decode_ahead": N (lan/node/README.md): the node decodes N tokens on its
// own from the one it is given, so a pool of one node pays one round trip per N tokens.
inline constexpr const char* kFeatureDecodeAhead = "decode_ahead";
// A forward's "segments" entries may carry their own "sample" (lan/node/README.md): the node
// samples each segment's logits rows with it.
inline constexpr const char* kFeatureSegmentSample = "segment_sample";
// The head stage may link to the first stage's node and push its sampled tokens there, which the
// first stage takes as its next forward's input (lan/node/stage_links.h: the ring): a burst of
// one-token forwards sent to every node at once decodes ahead over several nodes.
inline constexpr const char* kFeatureDecodeRing = "decode_ring";
// At most this many features are read from a node_info reply.
inline constexpr size_t kMaxNodeInfoFeatures = 32;

struct NodeInfo {
  std::string name;      // display name
  std::string deviceId;  // the node's identity (certificate fingerprint)
  std::vector<NodeDevice> devices;
  std::vector<NodeModel> models;
  // What the node wants its user to know (e.g. a proven identity clash: NodeService), for
  // `shoal-cli pool status` and the app. Optional in the reply; sanitized to one safe line each
  // (lan/discovery/display_name.h), at most kMaxNodeInfoWarnings of kMaxNodeInfoWarningBytes.
  std::vector<std::string> warnings;
  std::vector<NodeForward> forwards;  // the asking coordinator's links ("links")
  std::vector<CachedShard> shards;    // shards the asking coordinator streamed here ("shards")
  // Protocol extensions the node understands ("features"; optional, older nodes send none):
  // kFeatureDecodeAhead.
  std::vector<std::string> features;

  // True when the node holds a file with this SHA-256 (it can load any stage without streaming).
  bool hasModel(const std::string& sha256) const;
  bool hasFeature(const std::string& name) const;
};

// Throws shoal::Error naming the field ("node_info.devices[1].memory_total: ...") when a
// required field is missing, has the wrong type or an impossible value (negative, NaN, an
// empty or duplicate device id).
NodeInfo parseNodeInfo(const nlohmann::json& reply);

// The reply a node sends for this info (nodes and test fakes use it; parseNodeInfo reads it
// back to the same values).
nlohmann::json nodeInfoToJson(const NodeInfo& info);

}  // namespace shoal::lan
