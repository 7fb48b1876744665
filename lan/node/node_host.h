#pragma once
// The node side of the node protocol (the LAN design's "Node protocol", summarized below): hosts
// stages for coordinators and answers their requests. Transport-agnostic: NodeService
// (node_service.h) accepts trusted TLS connections and hands each one to serve(); tests may hand it
// any Connection.
//
// Protocol summary (control JSON "op"; a reply carries the request's integer "id"; failures are
// {"op":"error","id","message"}):
//   node_info -> node_info {name, device_id, devices[], models[], weight_bytes_received (since
//     start: a restarted node that loads from its shard cache reports 0)}
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
//   forward {stage_id, sequence, first_position, count, sample: null|{temperature, top_p, top_k,
//     seed[, min_p, repeat_penalty]}} + blob (int32 ids on the embedding stage, else f32
//     count x n_embd) -> forward_result {stage_id, count} + blob f32 hidden (count x n_embd) or
//     f32 logits (n_vocab, of the last token) when the stage has the head and sample is null,
//     or forward_result {stage_id, token} when the head samples
//   truncate {stage_id, sequence, from_position} -> ok;  unload_stage {stage_id} -> ok
//   telemetry -> telemetry {devices: [DeviceTelemetry]} (lan/pool/telemetry.h), sampled every
//     500 ms by sampleTelemetry()
// Stages belong to the connection that loaded them and are unloaded when it closes.

#include <atomic>
#include <cstdint>
#include <filesystem>
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
#include "lan/pool/telemetry.h"
#include "lan/transport/connection.h"

namespace shoal::lan {

struct NodeHostOptions {
  std::string name;                            // display name
  std::string deviceId;                        // this node's identity (identity.h)
  std::filesystem::path configDir;             // shards/ lives here
  uint64_t maxShardBytes = uint64_t{1} << 40;  // most weight bytes one streamed stage may announce
  // Measured figures by device id (device_profile.h), reported in node_info for the planner;
  // a device without an entry reports what its backend says (0: not profiled).
  std::map<std::string, DeviceProfile> profiles;
  // Offer GPU-backend devices that are really the CPU (type "cpu": Mesa's lavapipe, SwiftShader).
  // Off by default: such a device computes on the same cores as the CPU backend, far slower, and
  // unprofiled it would look to the planner like a GPU with fallback figures.
  bool offerSoftwareGpus = false;
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
  // Returns normally on close; the connection's stages are unloaded.
  void serve(Connection& connection, const std::atomic<bool>& stop);

  // Compute the telemetry figures over the interval since the last call (the service calls
  // this every 500 ms).
  void sampleTelemetry();

  std::vector<runtime::DeviceInfo> devices() const;
  // This node's identity as node_info and telemetry report it; changed when the node
  // regenerates its identity (NodeService, after an identity clash).
  std::string deviceId() const;
  void setDeviceId(std::string deviceId);
  // Weight payload bytes received over all connections since start (weights_chunk blobs).
  uint64_t weightBytesReceived() const { return m_weightBytesReceived.load(); }
  size_t stageCount() const;

 private:
  struct LoadedModel;
  struct HostedStage;
  struct Session;

  std::optional<Message> handle(const Message& request, Session& session);
  Message nodeInfo() const;
  Message loadStage(const Message& request, Session& session);
  Message weightsDone(const Message& request, Session& session);
  Message forward(const Message& request);
  Message telemetry() const;
  std::shared_ptr<HostedStage> findStage(const nlohmann::json& stageId) const;
  runtime::Backend& backendFor(const std::string& deviceId) const;
  // Throws shoal::Error when the stage's KV cache alone exceeds the device's memory.
  void checkFits(const std::string& deviceId, const model::ModelConfig& config,
                 const runtime::StageSpec& spec) const;
  std::shared_ptr<LoadedModel> openLocalModel(const LocalModel& local);
  void install(const nlohmann::json& stageId, std::shared_ptr<HostedStage> stage, Session& session);
  void unload(const std::string& key);

  NodeHostOptions m_options;
  std::vector<std::unique_ptr<runtime::Backend>> m_backends;
  std::vector<runtime::DeviceInfo> m_devices;
  std::shared_ptr<const ModelCatalog> m_catalog;

  mutable std::mutex m_mutex;                                      // guards the maps below
  std::map<std::string, std::shared_ptr<HostedStage>> m_stages;    // key: stage_id JSON text
  std::map<std::string, std::weak_ptr<LoadedModel>> m_openModels;  // key: sha256
  std::vector<DeviceTelemetry> m_telemetry;                        // last sample

  std::atomic<uint64_t> m_weightBytesReceived{0};
  mutable std::mutex m_idMutex;  // guards m_options.deviceId
};

}  // namespace shoal::lan
