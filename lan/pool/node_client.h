#pragma once
// The coordinator's side of the node protocol (the LAN design's "Node protocol"): one
// request/reply at a time over one Connection, replies matched by "id". Used from the
// generation thread and the telemetry thread; requests are serialized by a mutex, so a
// telemetry poll waits for the forward in flight (at most one token's time).
//
// Failures: TransportError (lan/transport/connection.h) when the node is unreachable, closed
// or too slow (recovery keys on it); shoal::Error for an `error` reply or a malformed reply.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "lan/pool/node_info.h"
#include "lan/pool/pool_builder.h"
#include "lan/pool/telemetry.h"
#include "lan/transport/connection.h"

namespace shoal::gguf {
class File;
}

namespace shoal::lan {

// Weight chunks are at most this large (the protocol's limit; the frame limit is 64 MiB).
inline constexpr size_t kWeightChunkBytes = 8u << 20;

struct ModelIdentity {
  std::string sha256;  // of the whole GGUF file, lowercase hex
  std::string name;    // file name, for logs and the node's shard cache
  uint64_t size = 0;
};

struct LoadStageRequest {
  std::string stageId;
  ModelIdentity model;
  StagePlacement placement;
  int32_t contextLength = 2048;
  int32_t maxSequences = 1;
  int32_t maxBatch = 256;  // most tokens one forward carries
};

struct LoadStageResult {
  double loadMs = 0;           // the node's figure
  std::string source;          // "local-file", "shard-cache" or "streamed"
  uint64_t streamedBytes = 0;  // weight bytes this coordinator sent
};

// Weight streaming progress: bytes sent so far of the total this stage needs.
using WeightsProgress = std::function<void(uint64_t sent, uint64_t total)>;

// "sample" of a forward request; the last stage samples (greedy when temperature <= 0).
struct RemoteSampling {
  float temperature = 0;
  float topP = 1;
  int32_t topK = 0;
  float minP = 0;
  uint64_t seed = 0;
};

struct ForwardRequest {
  std::string stageId;
  int32_t sequence = 0;
  int32_t firstPosition = 0;
  int32_t count = 0;
  std::span<const int32_t> tokens;         // first stage: count ids
  std::span<const float> hidden;           // other stages: count x nEmbd
  const RemoteSampling* sample = nullptr;  // last stage: sample instead of returning logits
};

struct ForwardReply {
  std::vector<float> values;  // hidden (count x nEmbd) or logits; empty when a token came back
  int32_t token = -1;         // the sampled token when sampling was asked for
};

class NodeClient {
 public:
  // Takes the connection over (shared so that a test may also talk on it raw).
  NodeClient(std::shared_ptr<Connection> connection, std::chrono::milliseconds timeout);
  ~NodeClient();
  NodeClient(const NodeClient&) = delete;
  NodeClient& operator=(const NodeClient&) = delete;

  const std::string& peerDeviceId() const { return m_connection->peerDeviceId(); }
  const std::string& peerAddress() const { return m_connection->peerAddress(); }
  bool isOpen() const { return m_connection->isOpen(); }
  void close() { m_connection->close(); }

  NodeInfo info();
  // One ping round trip, in seconds.
  double ping();
  // Sends `bytes` of payload and times the reply: bytes per second (round trip included).
  double probeBandwidth(size_t bytes);
  // load_stage (with the model's metadata as a tensor-less GGUF blob, which a node that has to
  // be streamed to writes into its shard); streams the tensors the node asks for from `model`
  // (need_weights: every "tensors" entry, and the "optional" ones the file has, except
  // token_embd.weight when the file has a separate output.weight) and waits up to loadTimeout
  // for stage_ready.
  LoadStageResult loadStage(const LoadStageRequest& request, const gguf::File& model,
                            const WeightsProgress& progress, std::chrono::milliseconds loadTimeout);
  ForwardReply forward(const ForwardRequest& request);
  void truncate(const std::string& stageId, int32_t sequence, int32_t fromPosition);
  void unloadStage(const std::string& stageId);
  // unload_stage sent, the answer not waited for (a destructor's: never blocks on a dead node
  // beyond a 1 s send); the late reply is skipped like any reply to an older request.
  void unloadStageNoWait(const std::string& stageId);
  std::vector<DeviceTelemetry> telemetry();

 private:
  // Sends `message` with a fresh id and returns the reply with that id (older replies, left
  // over from a request that timed out, are skipped). Throws shoal::Error for an error reply.
  Message request(Message message, std::chrono::milliseconds timeout);
  Message awaitReply(int64_t id, std::chrono::milliseconds timeout);

  std::shared_ptr<Connection> m_connection;
  std::chrono::milliseconds m_timeout;
  std::mutex m_mutex;  // one request in flight
  int64_t m_nextId = 1;
};

}  // namespace shoal::lan
