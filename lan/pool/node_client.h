#pragma once
// The coordinator's side of the node protocol (the LAN design's "Node protocol") over one
// Connection. A node answers the requests of a connection in the order they came, each reply
// carrying its request's "id", so several requests may be in flight at once: forwards are sent
// by sendForward() and received later by receiveForward() (RemoteStage's submit/wait), and the
// telemetry thread's requests interleave with them. Whichever waiting thread is free reads the
// connection and hands each reply to the request it answers.
//
// Failures: TransportError (lan/transport/connection.h) when the node is unreachable, closed
// or too slow (recovery keys on it); LinkFailure (forward_fields.h) for an `error` reply caused by
// direct forwarding's link; shoal::Error for any other `error` reply or a malformed reply.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/stage.h"
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

// One forward request: one segment of one sequence (the protocol carries one per request).
struct ForwardRequest {
  std::string stageId;
  // Several sequences run as one batch on the node (weights read once for all): their segments
  // in row order, `tokens`/`hidden` holding all their rows. Empty: the one segment below.
  std::span<const runtime::Segment> segments;
  int32_t sequence = 0;
  int32_t firstPosition = 0;
  int32_t count = 0;
  // Head stage: which rows' logits come back ("logits": "none" | "last" | "all").
  runtime::LogitRows logits = runtime::LogitRows::Last;
  std::span<const int32_t> tokens;  // first stage: count ids
  std::span<const float> hidden;    // other stages: count x nEmbd
  // Head stage: the node samples the last row instead of returning logits (greedy when
  // temperature <= 0); with logits All, every row (greedy only: speculative verification).
  const runtime::SampleRequest* sample = nullptr;
  // With `segments` (a node with kFeatureSegmentSample): each segment sampled with its own
  // request instead (`sample` unused).
  std::span<const runtime::SampleRequest> segmentSamples;
  bool decodeOrder = false;  // runtime::Segment::decodeOrder
  // Direct forwarding (lan/node/stage_links.h): the input rows come down the link from the
  // previous stage's node (`hidden` stays empty), and/or the output goes down the link to the
  // next one (the reply is only an acknowledgement, ForwardReply::forwarded).
  bool fromLink = false;
  bool toLink = false;
  // Decoding ahead (a node with kFeatureDecodeAhead; one segment of one token, `sample` given, a
  // stage with both ends): the node decodes this many tokens from the one given and returns
  // them (ForwardReply::tokens). 0: a plain forward.
  int32_t decodeAhead = 0;
};

struct ForwardReply {
  std::vector<float> values;    // hidden (count x nEmbd) or logits; empty when tokens came back
  int32_t token = -1;           // the sampled token when the last row was sampled
  std::vector<int32_t> tokens;  // the sampled tokens when every row was (logits All)
  // A request of several segments that the node sampled: per segment, its last row's token or
  // every row's.
  std::vector<std::vector<int32_t>> segmentTokens;
  bool forwarded = false;  // the output went down the stage's link (toLink)
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
  // A forward request in flight: sendForward() returns once it is sent, receiveForward() waits
  // (up to the timeout, counted from its call) for its reply. Requests on one connection are
  // answered in order, so a caller may send several before receiving the first. A request
  // sent and never received must be abandoned (its reply is then skipped).
  using RequestId = int64_t;
  RequestId sendForward(const ForwardRequest& request);
  ForwardReply receiveForward(RequestId id);
  void abandon(RequestId id);
  ForwardReply forward(const ForwardRequest& request) {
    return receiveForward(sendForward(request));
  }
  // Direct forwarding (lan/node/stage_links.h). linkAccept: the node accepts a link from
  // `fromDevice` into `stageId` and returns the route token; linkConnect: the node links
  // `stageId` to the node at `address` (pinned to `deviceId`) over `route` and returns the round
  // trip it measured on that link (its hello answered; 0 when the node does not say).
  // LinkFailure when the node cannot reach that one.
  std::string linkAccept(const std::string& stageId, const std::string& fromDevice);
  double linkConnect(const std::string& stageId, const std::string& address,
                     const std::string& deviceId, const std::string& route);
  // Returns the positions the node's stage kept (Stage::truncate).
  int32_t truncate(const std::string& stageId, int32_t sequence, int32_t fromPosition);
  void unloadStage(const std::string& stageId);
  // unload_stage sent, the answer not waited for (a destructor's: never blocks on a dead node
  // beyond a 1 s send); its reply is skipped like any reply nobody waits for.
  void unloadStageNoWait(const std::string& stageId);
  std::vector<DeviceTelemetry> telemetry();

 private:
  // A reply awaited: filled by whichever thread reads it.
  struct Awaited {
    std::optional<Message> reply;
    std::exception_ptr error;  // the connection failed, or a malformed reply answered it
  };

  // Sends `message` with a fresh id (none when !withId: a weights chunk) and, when
  // `awaitReply`, registers the id so that its reply is kept for awaitReply(). Returns the id.
  RequestId send(Message message, std::chrono::milliseconds timeout, bool withId, bool awaitReply);
  // The reply to request `id` (sent with awaitReply). Replies nobody waits for (a request that
  // timed out, unloadStageNoWait) are skipped. Throws shoal::Error for an error reply.
  Message awaitReply(RequestId id, std::chrono::milliseconds timeout);
  Message request(Message message, std::chrono::milliseconds timeout);
  // Files one message read from the connection (caller holds m_mutex).
  void dispatch(Message message);

  std::shared_ptr<Connection> m_connection;
  std::chrono::milliseconds m_timeout;
  std::mutex m_loadMutex;  // one load_stage (and its weight stream) at a time
  std::mutex m_sendMutex;  // ids go out in increasing order
  std::mutex m_mutex;      // guards what follows
  std::condition_variable m_arrived;
  std::map<RequestId, Awaited> m_awaited;  // sent, reply not taken yet
  bool m_reading = false;                  // a thread is in m_connection->receive()
  RequestId m_lastId = 0;                  // the last id sent
};

}  // namespace shoal::lan
