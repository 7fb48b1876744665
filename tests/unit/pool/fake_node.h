#pragma once
// An in-process pool member for the coordinator's tests: a Connection whose "peer" answers the
// node protocol synchronously with real CPU stages of the model (so a pooled greedy reply can
// be compared with a single-chain one), and which can be made to die like a kill -9'd node.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "lan/pool/node_info.h"
#include "lan/transport/connection.h"

namespace shoal::lan::testing {

struct FakeNodeConfig {
  std::string name;
  std::string deviceId;      // the node's identity
  uint64_t memoryBytes = 0;  // of its one device, "cpu0"
  bool hasModelFile = true;  // false: it asks for the weights (need_weights)
  // Layer ranges [first, last) of the model in its shard cache (streamed by this coordinator in
  // an earlier run): reported in node_info's shards, loaded without asking for weights.
  std::vector<std::pair<int32_t, int32_t>> cachedRanges;
  int dieAfterForwards = -1;  // >= 0: the connection dies when this forward request arrives
  bool decodeAhead = true;    // understands "decode_ahead" (and says so in node_info's features)
  bool segmentSample = true;  // samples each segment with its own "sample" (says so likewise)
};

// The node's state; outlives its connections (a test inspects it after the coordinator hung up).
class FakeNode {
 public:
  FakeNode(FakeNodeConfig config, const model::Model& model, const std::string& modelSha256,
           runtime::Backend& backend);

  NodeInfo info() const;
  // From now on: the connection dies when the n-th next forward request arrives.
  void dieAfterForwards(int n) {
    forwards = 0;
    m_config.dieAfterForwards = n;
  }
  // What the node received and did, for assertions.
  int forwards = 0;
  int batchedForwards = 0;  // forwards of several segments (sequences) at once
  int aheadForwards = 0;    // forwards that decoded ahead
  int aheadTokens = 0;      // the tokens they returned
  int segmentSamples = 0;   // segments sampled with their own request
  int loads = 0;
  int unloads = 0;
  uint64_t streamedBytes = 0;  // weight bytes received and verified
  std::vector<std::string> loadSources;
  bool dead = false;

  // Handles one request; returns the replies (none for weights_chunk). Sets dead when it dies.
  std::vector<Message> handle(const Message& request);

 private:
  Message reply(const Message& request, nlohmann::json control, std::vector<uint8_t> blob = {});
  Message loadStage(const Message& request);
  Message finishLoad(const nlohmann::json& load, const Message& request, const std::string& stageId,
                     const char* source);
  Message forward(const Message& request);

  FakeNodeConfig m_config;
  const model::Model& m_model;
  std::string m_modelSha256;
  runtime::Backend& m_backend;
  struct Pending {
    nlohmann::json load;               // the load_stage request
    std::vector<std::string> tensors;  // asked for
    std::map<std::string, std::vector<uint8_t>> received;
  };
  std::map<std::string, Pending> m_pending;  // stage id -> load waiting for weights
  std::map<std::string, std::unique_ptr<runtime::Stage>> m_stages;
};

// The coordinator's end of a connection to a FakeNode.
class FakeConnection final : public Connection {
 public:
  explicit FakeConnection(FakeNode& node, std::string address);

  void send(const Message& message, std::chrono::milliseconds timeout) override;
  Message receive(std::chrono::milliseconds timeout) override;
  const std::string& peerDeviceId() const override { return m_deviceId; }
  const std::string& peerAddress() const override { return m_address; }
  void close() override { m_open = false; }
  bool isOpen() const override { return m_open && !m_node.dead; }
  ConnectionStats stats() const override { return m_stats; }

 private:
  FakeNode& m_node;
  std::string m_deviceId;
  std::string m_address;
  bool m_open = true;
  std::deque<Message> m_replies;
  ConnectionStats m_stats;
};

}  // namespace shoal::lan::testing
