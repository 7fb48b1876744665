#pragma once
// The node side of the node protocol (the LAN design's "Node protocol", summarized below): hosts
// stages for coordinators and answers their requests. Transport-agnostic: NodeService
// (node_service.h) accepts trusted TLS connections and hands each one to serve(); tests may hand it
// any Connection.
//
// Protocol summary (control JSON "op"; a reply carries the request's integer "id"; failures are
// {"op":"error","id","message"}):
//   node_info -> node_info {name, device_id, devices[], models[], weight_bytes_received (since
//     start: a restarted node that loads from its shard cache reports 0), links[] (the asking
//     coordinator's stages linked to a next node: NodeHost::linksOf), shards[] (the asking
//     coordinator's cached shards: {model, first_layer, last_layer}), and what
//     setInfoExtras adds (NodeService: warnings[] for the user, discovery{} counters)}
//   ping {t} -> pong {t};  bandwidth_probe (blob) -> pong {bytes}
//   load_stage {stage_id, model{sha256,name,size}, device, first_layer, last_layer,
//     has_embedding, has_head, context_length, max_sequences[, max_batch]} + blob: the model's
//     metadata as a GGUF v3 file without tensors (what a streamed shard is written with; ignored
//     when the node has the model file or a cached shard)
//     -> stage_ready {stage_id, load_ms, source: "local-file"|"shard-cache"|"streamed"}
//      | need_weights {stage_id, tensors[], optional[]} (see shard_receiver.h for `optional`)
//   weights_chunk {stage_id, tensor, offset, total, type (ggml type id), dims[], sha256 (last
//     chunk: of the whole tensor)} + blob (<= 8 MiB) -> no reply (an error reply if refused)
//   weights_done {stage_id} -> stage_ready {source: "streamed"} once the shard is written/loaded
//   forward {stage_id, sequence, first_position, count[, logits: "none"|"last"|"all"], sample:
//     null|{temperature, top_p, top_k, seed[, min_p, repeat_penalty]}} + blob (int32 ids on the
//     embedding stage, else f32 count x n_embd): one segment of one sequence (a runtime::Batch
//     of one segment) -> forward_result {stage_id, count} + blob f32 hidden (count x n_embd) or,
//     when the stage has the head and sample is null, f32 logits of the rows `logits` asks for
//     (default "last": n_vocab values; "all": count x n_vocab; "none": empty), or
//     forward_result {stage_id, token} when the head samples (sample needs "last"). Requests
//     are answered in the order they came, so a coordinator may keep several in flight
//   forward's direct forwarding (stage_links.h): "to_link": true pushes the output down the
//     stage's link instead (-> forward_result {stage_id, count, forwarded: true}, no blob);
//     "from_link": true takes the input rows from the stage's route instead of the blob
//     (optional "link_wait_ms", default 30000); an error caused by the link carries
//     "link_failed": true
//   link_accept {stage_id, from_device} -> link_accepted {stage_id, route}
//   link_connect {stage_id, address, device_id, route} -> ok (or an error with link_failed)
//   truncate {stage_id, sequence, from_position} -> ok;  unload_stage {stage_id} -> ok
//   (a refused weights_chunk gets one error; the rest of that stream is dropped unanswered and
//   its weights_done gets an error; node_info's memory_free is what stages left of the device)
//   telemetry -> telemetry {devices: [DeviceTelemetry]} (lan/pool/telemetry.h), sampled every
//     500 ms by sampleTelemetry()
// Isolation between coordinators: a stage (its KV cache, sequences and samplers) and a weight
// stream belong to the connection that loaded them, and so to one verified peer device ID. A
// stage_id names a stage only on that connection: every other connection, of another
// coordinator or the same one, gets "unknown stage" for it and may load its own stage of the
// same id. A connection's stages are unloaded when it closes. Streamed shards are cached per
// coordinator (shard_cache.h). Limits: kMaxStagesPerConnection, kMaxStagesPerPeer,
// kMaxStagesPerNode stages, a load waiting for streamed weights counting as a stage; KV caches
// (and weights on devices other than the CPU) must fit in the device memory free at start minus
// what the node's other stages and loads hold; the shard cache stays under
// NodeHostOptions::shardCacheMaxBytes except for shards in use that the disk has room for.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"
#include "lan/node/device_profile.h"
#include "lan/node/model_catalog.h"
#include "lan/node/shard_cache.h"
#include "lan/node/stage_links.h"
#include "lan/pool/telemetry.h"
#include "lan/transport/connection.h"

namespace shoal::lan {

// Stages one connection may hold (a load waiting for streamed weights counts as one, here and
// below: it holds a KV claim and shard-cache room like a stage): a coordinator places one stage
// per device of a node for its model (nodes have a CPU and a GPU or two), so 16 leaves room for
// a second model, and bounds what one session can pin.
inline constexpr size_t kMaxStagesPerConnection = 16;
// Stages all connections of one peer device ID may hold together: half the node, so one
// coordinator (or a compromised one opening many connections) never takes every slot.
inline constexpr size_t kMaxStagesPerPeer = 32;
// Stages the node hosts in all: four coordinators at the per-connection limit. Each stage costs
// a thread-pool share, scratch buffers and file mappings even when its KV cache is tiny.
inline constexpr size_t kMaxStagesPerNode = 64;

struct NodeHostOptions {
  std::string name;                            // display name
  std::string deviceId;                        // this node's identity (identity.h)
  std::filesystem::path configDir;             // shards/ lives here
  uint64_t maxShardBytes = uint64_t{1} << 40;  // most weight bytes one streamed stage may announce
  // Cap of the shard cache (shard_cache.h) in bytes; least recently used shards no stage holds
  // are evicted to stay under it. 0: ShardCache::defaultMaxBytes (1/4 of the free disk, at most
  // 256 GiB). shoal-node --shard-cache-max-gb.
  uint64_t shardCacheMaxBytes = 0;
  // Measured figures by device id (device_profile.h), reported in node_info for the planner;
  // a device without an entry reports what its backend says (0: not profiled).
  std::map<std::string, DeviceProfile> profiles;
  // Offer GPU-backend devices that are really the CPU (type "cpu": Mesa's lavapipe, SwiftShader).
  // Off by default: such a device computes on the same cores as the CPU backend, far slower, and
  // unprofiled it would look to the planner like a GPU with fallback figures.
  bool offerSoftwareGpus = false;
  // Opens a link to the node at `address` ("host:port") whose certificate must be `deviceId`
  // (direct forwarding, stage_links.h); NodeService connects with the node's own identity. Empty:
  // link_connect is refused and the coordinator relays.
  std::function<std::unique_ptr<Connection>(const std::string& address,
                                            const std::string& deviceId)>
      linkConnector;
};

class NodeHost {
 public:
  // backends: the compute backends stages may be placed on (unavailable ones are skipped).
  NodeHost(NodeHostOptions options, std::vector<std::unique_ptr<runtime::Backend>> backends,
           std::shared_ptr<const ModelCatalog> catalog);
  ~NodeHost();
  NodeHost(const NodeHost&) = delete;
  NodeHost& operator=(const NodeHost&) = delete;

  // Answer requests on `connection` until it closes or `stop` is set (checked every 200 ms).
  // Returns normally on close; the connection's stages are unloaded. A connection whose first
  // message is link_hello is a link from another node (direct forwarding): it is served as one.
  // linkOnly (a device the node does not trust, only a coordinator introduced): nothing else is
  // served, and a connection that sends no link_hello within kLinkConnectTimeout is closed.
  void serve(Connection& connection, const std::atomic<bool>& stop, bool linkOnly = false);

  // Whether a route accepts links from `deviceId` now (the listener welcomes it then, though
  // the trust store does not know it).
  bool isIntroduced(const std::string& deviceId) const { return m_routes.isIntroduced(deviceId); }

  // Compute the telemetry figures over the interval since the last call (the service calls
  // this every 500 ms).
  void sampleTelemetry();

  std::vector<runtime::DeviceInfo> devices() const;
  // This node's identity as node_info and telemetry report it; changed when the node
  // regenerates its identity (NodeService, after an identity clash).
  std::string deviceId() const;
  void setDeviceId(std::string deviceId);
  // Extra top-level fields of every node_info reply (NodeService: "warnings" for the user, e.g. a
  // proven identity clash, and "discovery" counters). Called on the connection's thread for each
  // node_info; must return a JSON object. Set it before the first serve().
  void setInfoExtras(std::function<nlohmann::json()> extras) { m_infoExtras = std::move(extras); }
  // Weight payload bytes received over all connections since start (weights_chunk blobs).
  uint64_t weightBytesReceived() const { return m_weightBytesReceived.load(); }
  size_t stageCount() const;  // over all connections
  const ShardCache& shardCache() const { return *m_shardCache; }

 private:
  struct LoadedModel;
  struct HostedStage;
  struct Session;
  struct MemoryLedger;
  class MemoryClaim;
  class PendingSlot;
  // A stage's place in m_stages: {the serial of the connection (Session) that loaded it, its
  // stage_id as JSON text}. Scoped by connection, so no peer reaches another's stage by its id.
  using StageKey = std::pair<uint64_t, std::string>;

  std::optional<Message> handle(const Message& request, Session& session);
  Message nodeInfo() const;
  Message loadStage(const Message& request, Session& session);
  Message weightsDone(const Message& request, Session& session);
  Message forward(const Message& request, const Session& session);
  // A forward request's segments: one from its top-level fields, or the entries of "segments" (a
  // batch of several sequences, run together so the weights are read once for all).
  static std::vector<runtime::Segment> forwardSegments(const nlohmann::json& control,
                                                       const runtime::StageSpec& spec);
  // forward() once the stage and the segments are known; `next`: the stage's link when the rows
  // go on to the next node (to_link), one push per segment.
  Message runForward(const Message& request, HostedStage& stage,
                     const std::vector<runtime::Segment>& segments, StageLink* next);
  // A link from a node a coordinator introduced (stage_links.h), after its link_hello (which
  // must name a route opened for its device): only link_hidden, into that route's inbox, until
  // the connection closes, the route is revoked or `stop` is set.
  void serveLink(Connection& connection, const Message& hello, const std::atomic<bool>& stop);
  Message linkAccept(const Message& request, const Session& session);
  Message linkConnect(const Message& request, const Session& session);
  // The links to next nodes of the stages `owner` (a coordinator's device ID) loaded, for its
  // node_info ("links": stage_id, first_layer, last_layer, to_device, address, open).
  nlohmann::json linksOf(const std::string& owner) const;
  // Closes a stage's links: its route (inbox) and its link to the next node.
  void closeLinks(const StageKey& key, HostedStage& stage, const std::string& why);
  Message telemetry() const;
  // The stage `stageId` of this session; "unknown stage" (shoal::Error) for any other.
  std::shared_ptr<HostedStage> findStage(const nlohmann::json& stageId,
                                         const Session& session) const;
  runtime::Backend& backendFor(const std::string& deviceId) const;
  // Throws shoal::Error when one more stage would pass a kMaxStages* limit (`key` replaces a
  // stage of the session when it exists, which adds none). Other connections' loads waiting
  // for weights count as stages (the session's own is the load being checked). Caller holds
  // m_mutex.
  void checkStageCount(const Session& session, const StageKey& key) const;
  // Claims `bytes` of the device's memory for a stage (`what`: its part, for the message).
  // Throws shoal::Error when the device's free memory at start minus what the node's stages
  // (and loads in progress) already claimed cannot hold it.
  std::unique_ptr<MemoryClaim> claimMemory(const std::string& deviceId, uint64_t bytes,
                                           const std::string& what) const;
  // The KV cache of `spec` (zero-filled at creation: the allocation that would be an
  // out-of-memory kill), claimed before anything is loaded or streamed.
  std::unique_ptr<MemoryClaim> claimKvCache(const std::string& deviceId,
                                            const model::ModelConfig& config,
                                            const runtime::StageSpec& spec) const;
  // Builds the stage on its device and installs it under `stageId` in the session.
  Message createAndInstall(const Message& request, Session& session, const nlohmann::json& stageId,
                           const std::string& deviceId, const runtime::StageSpec& spec,
                           std::shared_ptr<LoadedModel> model, std::unique_ptr<MemoryClaim> kvClaim,
                           const char* source, std::chrono::steady_clock::time_point start);
  std::shared_ptr<LoadedModel> openLocalModel(const LocalModel& local);
  // A cached or just-streamed shard, mapped and bound for `spec`, kept from eviction by `pin`.
  // shoal::Error when it lacks what the stage needs (a shard cut for another role of the range).
  static std::shared_ptr<LoadedModel> openShard(const std::filesystem::path& file,
                                                const runtime::StageSpec& spec,
                                                ShardCache::Pin pin);
  void install(const StageKey& key, std::shared_ptr<HostedStage> stage, Session& session);
  void unload(const StageKey& key);

  NodeHostOptions m_options;
  std::vector<std::unique_ptr<runtime::Backend>> m_backends;
  std::vector<runtime::DeviceInfo> m_devices;  // memoryFree: as measured when the node started
  std::shared_ptr<const ModelCatalog> m_catalog;
  std::unique_ptr<ShardCache> m_shardCache;
  std::shared_ptr<MemoryLedger> m_memory;  // device memory claimed by stages, by device id

  mutable std::mutex m_mutex;                                 // guards the maps below
  std::map<StageKey, std::shared_ptr<HostedStage>> m_stages;  // every connection's
  // Loads waiting for streamed weights (PendingSlot), at most one per connection: its serial ->
  // its peer device ID.
  std::map<uint64_t, std::string> m_pendingLoads;
  std::map<std::string, std::weak_ptr<LoadedModel>> m_openModels;  // key: sha256
  std::vector<DeviceTelemetry> m_telemetry;                        // last sample
  std::atomic<uint64_t> m_nextSession{1};                          // Session serials

  std::atomic<uint64_t> m_weightBytesReceived{0};
  LinkRoutes m_routes;  // direct-forwarding routes into this node's stages
  std::function<nlohmann::json()> m_infoExtras;
  mutable std::mutex m_idMutex;  // guards m_options.deviceId
};

}  // namespace shoal::lan
