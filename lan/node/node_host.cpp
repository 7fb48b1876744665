#include "lan/node/node_host.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <span>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/kv_footprint.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/tensor_table.h"
#include "engine/runtime/decode_ahead.h"
#include "engine/runtime/sampler.h"
#include "lan/node/request_fields.h"
#include "lan/node/shard_receiver.h"
#include "lan/pool/forward_fields.h"
#include "lan/pool/node_info.h"

namespace shoal::lan {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr auto kPollInterval = std::chrono::milliseconds(200);

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// The KV cache a stage allocates (and zero-fills) at creation: the planner's figure
// (engine/model/kv_footprint.h), so a plan never meets a refusal the planner did not foresee.
uint64_t kvCacheBytes(const model::ModelConfig& c, const runtime::StageSpec& spec) {
  return model::kvCacheBytes(c, spec.firstLayer, spec.lastLayer, spec.contextLength,
                             spec.maxSequences);
}

// Bytes a stage occupies: its tensors (where they are mapped) plus its KV cache.
uint64_t stageBytes(const model::ModelConfig& c, const model::ModelWeights& w,
                    const runtime::StageSpec& spec) {
  // Each tensor once: a tied head's output is the embedding.
  std::set<const gguf::TensorInfo*> tensors;
  for (const model::StageTensor& t :
       model::stageTensors(c, spec.firstLayer, spec.lastLayer, spec.hasEmbedding, spec.hasHead)) {
    const model::Tensor bound = t.layer >= 0 ? w.layers[size_t(t.layer)][t.role] : w[t.role];
    if (bound) tensors.insert(bound);
  }
  uint64_t total = 0;
  for (const gguf::TensorInfo* t : tensors) total += t->nbytes;
  return total + kvCacheBytes(c, spec);
}

}  // namespace

// A model file (whole model or shard) mapped once and shared by the stages built from it.
struct NodeHost::LoadedModel {
  // A cached shard is kept from eviction while it is mapped (declared first: released last).
  std::optional<ShardCache::Pin> pin;
  gguf::File file;
  model::ModelConfig config;
  model::ModelWeights weights;
};

struct NodeHost::MemoryLedger {
  std::mutex mutex;
  std::map<std::string, uint64_t> claimed;  // bytes by device id
};

// Device memory claimed for one stage (or one load in progress); given back when destroyed.
class NodeHost::MemoryClaim {
 public:
  MemoryClaim(std::shared_ptr<MemoryLedger> ledger, std::string deviceId, uint64_t bytes)
      : m_ledger(std::move(ledger)), m_deviceId(std::move(deviceId)), m_bytes(bytes) {}
  ~MemoryClaim() {
    std::lock_guard lock(m_ledger->mutex);
    m_ledger->claimed[m_deviceId] -= m_bytes;
  }
  MemoryClaim(const MemoryClaim&) = delete;
  MemoryClaim& operator=(const MemoryClaim&) = delete;

 private:
  std::shared_ptr<MemoryLedger> m_ledger;
  std::string m_deviceId;
  uint64_t m_bytes;
};

// A load waiting for streamed weights, counted against the stage limits (checkStageCount)
// while it lives: it holds a KV claim and shard-cache room as a stage does, so a coordinator
// that starts streams and never finishes them must not pass the limits. Created with m_mutex
// held; destroyed without it.
class NodeHost::PendingSlot {
 public:
  PendingSlot(NodeHost& host, uint64_t serial, const std::string& peer)
      : m_host(host), m_serial(serial) {
    m_host.m_pendingLoads[serial] = peer;
  }
  ~PendingSlot() {
    std::lock_guard lock(m_host.m_mutex);
    m_host.m_pendingLoads.erase(m_serial);
  }
  PendingSlot(const PendingSlot&) = delete;
  PendingSlot& operator=(const PendingSlot&) = delete;

 private:
  NodeHost& m_host;
  uint64_t m_serial;
};

struct NodeHost::HostedStage {
  std::shared_ptr<LoadedModel> model;
  // The device memory it holds (KV cache; weights too off the CPU), released with the stage,
  // after any forward still running on it. Declared before `stage`: outlives it.
  std::vector<std::unique_ptr<MemoryClaim>> memory;
  std::unique_ptr<runtime::Stage> stage;
  std::string deviceId;
  std::string owner;         // the device ID of the coordinator that loaded it
  uint64_t memoryBytes = 0;  // stageBytes(), for telemetry
  std::mutex mutex;          // one forward/truncate at a time
  // Samplers of the head, per sequence; rebuilt when a sequence restarts or the params change.
  std::map<int32_t, std::pair<runtime::SamplerParams, std::unique_ptr<runtime::Sampler>>> samplers;
  // Telemetry counters (written under `mutex`, read by sampleTelemetry).
  std::atomic<int64_t> busyNs{0};
  std::atomic<int64_t> tokens{0};
  std::atomic<int32_t> waiting{0};
  int64_t lastBusyNs = 0, lastTokens = 0, lastSampleNs = 0;
  // Direct forwarding (stage_links.h), guarded by linkMutex: the route's inbox this stage reads
  // from_link rows from, and its link to the next stage's node.
  std::mutex linkMutex;
  std::shared_ptr<LinkInbox> inbox;
  std::shared_ptr<StageLink> next;
};

struct NodeHost::Session {
  uint64_t serial = 0;                 // unique per connection: the scope of its stage ids
  std::string peer;                    // the connection's verified device ID
  std::vector<std::string> stageKeys;  // stage ids (JSON text) this connection loaded
  // A stage waiting for streamed weights.
  struct Pending {
    json stageId;
    std::string deviceId;
    std::string sha256;
    runtime::StageSpec spec;
    std::unique_ptr<PendingSlot> slot;     // counted against the stage limits until done
    std::unique_ptr<MemoryClaim> kvClaim;  // claimed before the first weight is asked for
    std::unique_ptr<ShardCache::Reservation> reservation;  // declared first: outlives receiver
    std::unique_ptr<ShardReceiver> receiver;
    std::filesystem::path shardFile;
    Clock::time_point start;
  };
  std::optional<Pending> pending;
  // The stage_id and reason of the last stream refused, until its weights_done or a load_stage.
  std::optional<std::pair<json, std::string>> refused;
};

NodeHost::NodeHost(NodeHostOptions options, std::vector<std::unique_ptr<runtime::Backend>> backends,
                   std::shared_ptr<const ModelCatalog> catalog)
    : m_options(std::move(options)),
      m_catalog(std::move(catalog)),
      m_memory(std::make_shared<MemoryLedger>()) {
  for (auto& b : backends) {
    if (!b || !b->availability().available) continue;
    for (auto& d : b->devices()) {
      if (d.backend != "cpu" && d.type == "cpu" && !m_options.offerSoftwareGpus) continue;
      if (const auto it = m_options.profiles.find(d.id); it != m_options.profiles.end()) {
        d.bandwidthBytesPerS = it->second.bandwidthBytesPerS;
        d.flopsPerS = it->second.flopsPerS;
      }
      m_devices.push_back(d);
    }
    m_backends.push_back(std::move(b));
  }
  if (!m_catalog) m_catalog = std::make_shared<ModelCatalog>("", "");
  m_shardCache =
      std::make_unique<ShardCache>(m_options.configDir / "shards", m_options.shardCacheMaxBytes);
}

NodeHost::~NodeHost() = default;

std::vector<runtime::DeviceInfo> NodeHost::devices() const { return m_devices; }

std::string NodeHost::deviceId() const {
  std::lock_guard lock(m_idMutex);
  return m_options.deviceId;
}

void NodeHost::setDeviceId(std::string deviceId) {
  std::lock_guard lock(m_idMutex);
  m_options.deviceId = std::move(deviceId);
}

size_t NodeHost::stageCount() const {
  std::lock_guard lock(m_mutex);
  return m_stages.size();
}

void NodeHost::serve(Connection& connection, const std::atomic<bool>& stop, bool linkOnly) {
  Session session;
  session.serial = m_nextSession++;
  session.peer = connection.peerDeviceId();
  const auto start = Clock::now();
  bool first = true;
  while (!stop.load() && connection.isOpen()) {
    Message request;
    try {
      request = connection.receive(kPollInterval);
    } catch (const TransportError& e) {
      if (e.kind() == TransportError::Kind::Timeout) {
        if (linkOnly && Clock::now() - start > kLinkConnectTimeout) break;
        continue;
      }
      break;
    }
    if (first && request.control.value("op", "") == "link_hello") {
      serveLink(connection, request, stop);
      break;
    }
    first = false;
    if (linkOnly) break;  // an introduced device gets nothing but its link
    std::optional<Message> answer = handle(request, session);
    if (!answer) continue;
    try {
      connection.send(*answer);
    } catch (const TransportError& e) {
      std::fprintf(stderr, "shoal-node: reply to %s failed: %s\n", connection.peerAddress().c_str(),
                   e.what());
      break;
    }
  }
  for (const auto& key : session.stageKeys) unload({session.serial, key});
}

std::optional<Message> NodeHost::handle(const Message& request, Session& session) {
  const std::string op = request.control.value("op", "");
  try {
    if (op == "node_info") {
      Message m = nodeInfo();
      m.control["id"] = request.control.value("id", json());
      m.control["links"] = linksOf(session.peer);
      // The shards this coordinator streamed here before: its planner prefers a layout that
      // reuses them (lan/pool/cached_layout.h).
      json shards = json::array();
      for (const ShardCache::Shard& sh : m_shardCache->shardsOf(session.peer, kMaxNodeInfoShards)) {
        shards.push_back(
            {{"model", sh.sha256}, {"first_layer", sh.firstLayer}, {"last_layer", sh.lastLayer}});
      }
      m.control["shards"] = std::move(shards);
      return m;
    }
    if (op == "ping") {
      Message m = reply(request, "pong");
      m.control["t"] = request.control.value("t", json());
      return m;
    }
    if (op == "bandwidth_probe") {
      Message m = reply(request, "pong");
      m.control["bytes"] = request.blob.size();
      return m;
    }
    if (op == "load_stage") return loadStage(request, session);
    if (op == "weights_chunk") {
      const json stageId = request.control.value("stage_id", json());
      // The rest of a stream refused earlier: already answered by one error (the coordinator
      // sends every chunk before it reads), so no error per chunk.
      if (session.refused && stageId == session.refused->first) return std::nullopt;
      if (!session.pending || stageId != session.pending->stageId) {
        throw Error("weights_chunk: no stage of this connection is waiting for weights");
      }
      try {
        session.pending->receiver->addChunk(request.control, request.blob);
      } catch (const std::exception& e) {
        // A bad stream is dropped whole; the coordinator starts over.
        session.pending.reset();
        session.refused = {stageId, e.what()};
        throw;
      }
      m_weightBytesReceived += request.blob.size();
      return std::nullopt;
    }
    if (op == "weights_done") return weightsDone(request, session);
    if (op == "forward") return forward(request, session);
    if (op == "link_accept") return linkAccept(request, session);
    if (op == "link_connect") return linkConnect(request, session);
    if (op == "truncate") {
      auto s = findStage(request.control.value("stage_id", json()), session);
      const int32_t seq =
          intField(request.control, "sequence", 0, s->stage->spec().maxSequences - 1);
      const int32_t from = intField(request.control, "from_position", 0, INT32_MAX);
      std::lock_guard lock(s->mutex);
      const int32_t kept = s->stage->truncate(seq, from);
      if (kept == 0) s->samplers.erase(seq);
      Message r = reply(request, "ok");
      r.control["kept"] = kept;  // Stage::truncate: fewer than from where it cannot resume there
      return r;
    }
    if (op == "unload_stage") {
      const json stageId = request.control.value("stage_id", json());
      findStage(stageId, session);  // "unknown stage" for a stage of another connection
      const std::string key = stageKey(stageId);
      unload({session.serial, key});
      std::erase(session.stageKeys, key);
      return reply(request, "ok");
    }
    if (op == "telemetry") {
      Message m = telemetry();
      m.control["id"] = request.control.value("id", json());
      return m;
    }
    throw Error("unknown op '" + op + "'");
  } catch (const std::exception& e) {
    Message m = reply(request, "error");
    m.control["message"] = e.what();
    if (dynamic_cast<const LinkFailure*>(&e)) m.control["link_failed"] = true;
    return m;
  }
}

Message NodeHost::nodeInfo() const {
  NodeInfo info;
  info.name = m_options.name;
  info.deviceId = deviceId();
  for (const auto& d : m_devices) {
    NodeDevice dev;
    dev.id = d.id;
    dev.backend = d.backend;
    dev.name = d.name;
    dev.type = d.type;
    dev.memoryTotal = d.memoryTotal;
    {
      // Free at start minus what stages claim since: what a new stage can still get.
      std::lock_guard lock(m_memory->mutex);
      const auto it = m_memory->claimed.find(d.id);
      const uint64_t claimed = it == m_memory->claimed.end() ? 0 : it->second;
      dev.memoryFree = d.memoryFree - std::min(d.memoryFree, claimed);
    }
    dev.bandwidthBytesPerS = d.bandwidthBytesPerS;
    dev.flopsPerS = d.flopsPerS;
    info.devices.push_back(std::move(dev));
  }
  for (const auto& lm : m_catalog->models()) info.models.push_back({lm.file, lm.sha256, lm.size});
  info.features.push_back(kFeatureDecodeAhead);
  info.features.push_back(kFeatureSegmentSample);
  info.features.push_back(kFeatureDecodeRing);
  Message m;
  m.control = nodeInfoToJson(info);
  m.control["weight_bytes_received"] = m_weightBytesReceived.load();
  if (m_infoExtras) {
    const nlohmann::json extras = m_infoExtras();
    for (const auto& [key, value] : extras.items()) m.control[key] = value;
  }
  return m;
}

runtime::Backend& NodeHost::backendFor(const std::string& deviceId) const {
  // Only the devices node_info offers (not a software GPU left out of m_devices).
  const bool offered = std::any_of(m_devices.begin(), m_devices.end(),
                                   [&](const runtime::DeviceInfo& d) { return d.id == deviceId; });
  if (offered) {
    for (const auto& b : m_backends) {
      for (const auto& d : b->devices()) {
        if (d.id == deviceId) return *b;
      }
    }
  }
  throw Error("load_stage: no device '" + deviceId + "' on this node");
}

std::shared_ptr<NodeHost::LoadedModel> NodeHost::openLocalModel(const LocalModel& local) {
  {
    std::lock_guard lock(m_mutex);
    if (auto open = m_openModels[local.sha256].lock()) return open;
  }
  auto m = std::make_shared<LoadedModel>(
      LoadedModel{std::nullopt, gguf::File::open(local.path), {}, {}});
  m->config = model::ModelConfig::fromGguf(m->file);
  m->weights = model::ModelWeights::bind(m->file, m->config);
  std::lock_guard lock(m_mutex);
  m_openModels[local.sha256] = m;
  return m;
}

void NodeHost::checkStageCount(const Session& session, const StageKey& key) const {
  if (m_stages.count(key)) return;  // replaces a stage of this session
  size_t mine = 0, peers = 0, all = m_stages.size();
  for (const auto& [k, s] : m_stages) {
    mine += k.first == session.serial;
    peers += s->owner == session.peer;
  }
  for (const auto& [serial, peer] : m_pendingLoads) {
    if (serial == session.serial) continue;  // the load being checked
    peers += peer == session.peer;
    ++all;
  }
  const auto refuse = [](size_t limit, const std::string& who) {
    throw Error("load_stage: " + who + " already holds " + std::to_string(limit) +
                " stages (loaded or waiting for weights), the most allowed; unload one first");
  };
  if (mine >= kMaxStagesPerConnection) refuse(kMaxStagesPerConnection, "this connection");
  if (peers >= kMaxStagesPerPeer) refuse(kMaxStagesPerPeer, "device " + session.peer);
  if (all >= kMaxStagesPerNode) refuse(kMaxStagesPerNode, "this node");
}

void NodeHost::install(const StageKey& key, std::shared_ptr<HostedStage> stage, Session& session) {
  stage->lastSampleNs = nowNs();
  stage->owner = session.peer;
  std::shared_ptr<HostedStage> replaced;
  {
    std::lock_guard lock(m_mutex);
    checkStageCount(session, key);  // again: other connections may have loaded meanwhile
    auto& slot = m_stages[key];
    replaced = std::move(slot);
    slot = std::move(stage);
  }
  if (replaced) closeLinks(key, *replaced, "the stage was replaced");
  if (std::find(session.stageKeys.begin(), session.stageKeys.end(), key.second) ==
      session.stageKeys.end()) {
    session.stageKeys.push_back(key.second);
  }
}

void NodeHost::unload(const StageKey& key) {
  std::shared_ptr<HostedStage> gone;
  {
    std::lock_guard lock(m_mutex);
    const auto it = m_stages.find(key);
    if (it == m_stages.end()) return;
    gone = std::move(it->second);
    m_stages.erase(it);
  }
  closeLinks(key, *gone, "the stage was unloaded");
  // Freed here, outside the map lock; a forward still running on it holds its own reference.
}

std::shared_ptr<NodeHost::LoadedModel> NodeHost::openShard(const std::filesystem::path& file,
                                                           const runtime::StageSpec& spec,
                                                           ShardCache::Pin pin) {
  auto m =
      std::make_shared<LoadedModel>(LoadedModel{std::move(pin), gguf::File::open(file), {}, {}});
  m->config = model::ModelConfig::fromGguf(m->file);
  m->weights = model::ModelWeights::bindRange(m->file, m->config, spec.firstLayer, spec.lastLayer,
                                              spec.hasEmbedding, spec.hasHead);
  return m;
}

Message NodeHost::createAndInstall(const Message& request, Session& session, const json& stageId,
                                   const std::string& deviceId, const runtime::StageSpec& spec,
                                   std::shared_ptr<LoadedModel> model,
                                   std::unique_ptr<MemoryClaim> kvClaim, const char* source,
                                   Clock::time_point start) {
  runtime::Backend& backend = backendFor(deviceId);
  auto hosted = std::make_shared<HostedStage>();
  hosted->memory.push_back(std::move(kvClaim));
  hosted->memoryBytes = stageBytes(model->config, model->weights, spec);
  const bool onCpu = std::any_of(m_devices.begin(), m_devices.end(), [&](const auto& d) {
    return d.id == deviceId && d.backend == "cpu";
  });
  if (!onCpu) {
    // Uploaded into the device's memory, unlike the CPU's file-backed (shared, reclaimable)
    // mappings.
    hosted->memory.push_back(
        claimMemory(deviceId, hosted->memoryBytes - kvCacheBytes(model->config, spec),
                    "the weights of layers [" + std::to_string(spec.firstLayer) + ", " +
                        std::to_string(spec.lastLayer) + ")"));
  }
  const runtime::ModelSource src{&model->file, &model->config, &model->weights};
  hosted->stage = backend.createStage(deviceId, src, spec);
  hosted->model = std::move(model);
  hosted->deviceId = deviceId;
  install({session.serial, stageKey(stageId)}, std::move(hosted), session);
  Message m = reply(request, "stage_ready");
  m.control["stage_id"] = stageId;
  m.control["source"] = source;
  m.control["load_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return m;
}

Message NodeHost::loadStage(const Message& request, Session& session) {
  const auto start = Clock::now();
  const json& c = request.control;
  const json stageId = c.value("stage_id", json());
  const StageKey key{session.serial, stageKey(stageId)};  // validates
  const json& modelRef = c.value("model", json::object());
  const std::string sha = modelRef.is_object() ? stringField(modelRef, "sha256") : "";
  if (!isHexSha256(sha)) throw Error("load_stage: model.sha256 is not 64 lowercase hex digits");
  const std::string deviceId = stringField(c, "device");
  backendFor(deviceId);  // validates
  runtime::StageSpec spec;
  spec.firstLayer = intField(c, "first_layer", 0, 1 << 16);
  spec.lastLayer = intField(c, "last_layer", spec.firstLayer, 1 << 16);
  spec.hasEmbedding = boolField(c, "has_embedding");
  spec.hasHead = boolField(c, "has_head");
  spec.contextLength = intField(c, "context_length", 1, 1 << 24);
  spec.maxSequences = intField(c, "max_sequences", 1, 4096);
  if (c.contains("max_batch")) spec.maxBatch = intField(c, "max_batch", 1, 1 << 16);

  // The stage id is reused: replace what it held (its memory is free for the new one).
  unload(key);
  std::erase(session.stageKeys, key.second);
  session.pending.reset();
  session.refused.reset();
  {
    std::lock_guard lock(m_mutex);
    checkStageCount(session, key);  // before anything is loaded or streamed
  }

  const auto ready = [&](std::shared_ptr<LoadedModel> model, const char* source) {
    auto kv = claimKvCache(deviceId, model->config, spec);
    return createAndInstall(request, session, stageId, deviceId, spec, std::move(model),
                            std::move(kv), source, start);
  };

  if (const auto local = m_catalog->findBySha256(sha))
    return ready(openLocalModel(*local), "local-file");

  // Only a shard this coordinator streamed itself (shard_cache.h: who vouched for it).
  const auto shardFile = m_shardCache->pathFor(session.peer, sha, spec.firstLayer, spec.lastLayer);
  std::shared_ptr<LoadedModel> cached;
  if (auto pin = m_shardCache->acquire(shardFile)) {
    try {
      cached = openShard(shardFile, spec, std::move(*pin));
    } catch (const Error& e) {
      // A shard cut for another role of the same range (or damaged): fetch the weights again.
      std::fprintf(stderr, "shoal-node: cached shard %s not usable (%s); asking for weights\n",
                   shardFile.string().c_str(), e.what());
    }
  }
  if (cached) return ready(std::move(cached), "shard-cache");

  if (request.blob.empty()) {
    throw Error("load_stage: this node has neither model " + sha +
                " nor a cached shard of it from this coordinator, and the request carries no "
                "metadata to stream it with");
  }
  const gguf::File meta = gguf::File::fromBuffer(request.blob, "load_stage metadata");
  const model::ModelConfig config = model::ModelConfig::fromGguf(meta);
  if (spec.lastLayer > config.nLayer) {
    throw Error("load_stage: last_layer " + std::to_string(spec.lastLayer) + " beyond the " +
                std::to_string(config.nLayer) + " layers of model " + sha);
  }
  StageTensorList names =
      stageTensorNames(config, spec.firstLayer, spec.lastLayer, spec.hasEmbedding, spec.hasHead);
  Session::Pending p;
  {
    std::lock_guard lock(m_mutex);
    // Again (other connections may have loaded meanwhile), and counted from now on.
    checkStageCount(session, key);
    p.slot = std::make_unique<PendingSlot>(*this, session.serial, session.peer);
  }
  p.kvClaim = claimKvCache(deviceId, config, spec);  // before any weight is sent
  p.stageId = stageId;
  p.deviceId = deviceId;
  p.sha256 = sha;
  p.spec = spec;
  p.shardFile = shardFile;
  p.start = start;
  p.reservation = m_shardCache->reserve();
  p.receiver = std::make_unique<ShardReceiver>(
      shardFile, meta.metadata(), names, m_options.maxShardBytes,
      [reservation = p.reservation.get()](uint64_t bytes) { reservation->grow(bytes); });
  session.pending = std::move(p);
  Message m = reply(request, "need_weights");
  m.control["stage_id"] = stageId;
  m.control["tensors"] = names.required;
  m.control["optional"] = names.optional;
  return m;
}

Message NodeHost::weightsDone(const Message& request, Session& session) {
  if (session.refused && request.control.value("stage_id", json()) == session.refused->first) {
    const std::string why = session.refused->second;
    session.refused.reset();
    throw Error("weights_done: the stream was refused: " + why);
  }
  if (!session.pending || request.control.value("stage_id", json()) != session.pending->stageId) {
    throw Error("weights_done: no stage of this connection is waiting for weights");
  }
  Session::Pending p = std::move(*session.pending);
  session.pending.reset();
  p.receiver->finish();
  p.receiver.reset();
  ShardCache::Pin pin = p.reservation->commit(p.shardFile);
  return createAndInstall(request, session, p.stageId, p.deviceId, p.spec,
                          openShard(p.shardFile, p.spec, std::move(pin)), std::move(p.kvClaim),
                          "streamed", p.start);
}

std::unique_ptr<NodeHost::MemoryClaim> NodeHost::claimMemory(const std::string& deviceId,
                                                             uint64_t bytes,
                                                             const std::string& what) const {
  // A peer is trusted but may still ask for the impossible, alone or beside other coordinators'
  // stages: the KV cache is zero-filled at creation, so an oversized request would be an
  // out-of-memory kill, not an error reply. The budget is what was free when the node started
  // (before any stage); stages and loads in progress claim their share of it.
  uint64_t budget = 0;
  for (const auto& d : m_devices) {
    if (d.id == deviceId) budget = d.memoryFree > 0 ? d.memoryFree : d.memoryTotal;
  }
  std::lock_guard lock(m_memory->mutex);
  uint64_t& claimed = m_memory->claimed[deviceId];
  if (budget > 0 && (bytes > budget || claimed > budget - bytes)) {
    throw Error("load_stage: " + what + " needs " + std::to_string(bytes) + " bytes; device " +
                deviceId + " has " + std::to_string(budget - std::min(budget, claimed)) +
                " left of the " + std::to_string(budget) +
                " free when the node started (the rest is held by stages loaded or loading)");
  }
  claimed += bytes;
  return std::make_unique<MemoryClaim>(m_memory, deviceId, bytes);
}

std::unique_ptr<NodeHost::MemoryClaim> NodeHost::claimKvCache(
    const std::string& deviceId, const model::ModelConfig& config,
    const runtime::StageSpec& spec) const {
  return claimMemory(deviceId, kvCacheBytes(config, spec),
                     "the KV cache of layers [" + std::to_string(spec.firstLayer) + ", " +
                         std::to_string(spec.lastLayer) + ") for " +
                         std::to_string(spec.maxSequences) + " sequence(s) x " +
                         std::to_string(spec.contextLength) + " positions");
}

std::shared_ptr<NodeHost::HostedStage> NodeHost::findStage(const json& stageId,
                                                           const Session& session) const {
  const std::string key = stageKey(stageId);
  std::lock_guard lock(m_mutex);
  const auto it = m_stages.find({session.serial, key});
  // The same answer whether or not another connection has a stage of that id.
  if (it == m_stages.end()) throw Error("unknown stage " + key + " on this connection");
  return it->second;
}

std::vector<runtime::Segment> NodeHost::forwardSegments(const json& c,
                                                        const runtime::StageSpec& spec) {
  // One segment's fields: at the top level, or each entry of "segments".
  auto segmentOf = [&spec](const json& fields) {
    runtime::Segment segment;
    segment.sequence = intField(fields, "sequence", 0, spec.maxSequences - 1);
    segment.firstPosition = intField(fields, "first_position", 0, spec.contextLength - 1);
    segment.count = intField(fields, "count", 1, spec.maxBatch);
    const json logits = fields.value("logits", json("last"));
    const std::optional<runtime::LogitRows> rows =
        logits.is_string() ? parseLogitRows(logits.get<std::string>()) : std::nullopt;
    if (!rows) throw Error("forward: 'logits' must be \"none\", \"last\" or \"all\"");
    segment.logits = *rows;
    if (const auto it = fields.find("decode_order"); it != fields.end() && !it->is_boolean()) {
      throw Error("forward: 'decode_order' must be a boolean");
    }
    segment.decodeOrder = boolField(fields, "decode_order");
    return segment;
  };
  const auto list = c.find("segments");
  if (list == c.end()) return {segmentOf(c)};
  // A batch of several sequences (RemoteStage: weights read once for all of them).
  if (!list->is_array() || list->empty() || list->size() > size_t(spec.maxBatch)) {
    throw Error("forward: 'segments' must be an array of 1 to " + std::to_string(spec.maxBatch) +
                " segments");
  }
  std::vector<runtime::Segment> segments;
  int64_t rows = 0;
  for (size_t i = 0; i < list->size(); ++i) {
    if (!(*list)[i].is_object()) throw Error("forward: segments[" + std::to_string(i) + "]");
    json fields = (*list)[i];
    fields["op"] = "forward: segments[" + std::to_string(i) + "]";  // for intField's messages
    segments.push_back(segmentOf(fields));
    rows += segments.back().count;
  }
  if (rows > spec.maxBatch) {
    throw Error("forward: " + std::to_string(rows) + " rows in all, the stage takes at most " +
                std::to_string(spec.maxBatch));
  }
  return segments;
}

Message NodeHost::forward(const Message& request, const Session& session) {
  const json& c = request.control;
  auto s = findStage(c.value("stage_id", json()), session);
  const runtime::StageSpec& spec = s->stage->spec();
  // The stage checks the segments against the positions it holds.
  const std::vector<runtime::Segment> segments = forwardSegments(c, spec);
  for (const char* flag : {"from_link", "to_link"}) {
    if (const auto it = c.find(flag); it != c.end() && !it->is_boolean()) {
      throw Error(std::string("forward: '") + flag + "' must be a boolean");
    }
  }
  const bool toLink = boolField(c, "to_link");
  std::shared_ptr<StageLink> next;
  if (toLink) {
    std::lock_guard lock(s->linkMutex);
    next = s->next;
    if (!next) {
      throw LinkFailure(spec.hasHead ? "forward: this head stage has no ring link to the first node"
                                     : "forward: this stage has no link to the next node");
    }
  }
  // From here on a failure is pushed down the link too, so that the next node's forward of these
  // rows (the ring: of the token after them) fails at once instead of waiting for them.
  try {
    return runForward(request, *s, segments, next.get());
  } catch (const std::exception& e) {
    if (next) {
      try {
        for (const runtime::Segment& segment : segments) {
          next->push(
              spec.hasHead
                  ? LinkedRows{segment.sequence,
                               segment.firstPosition + segment.count,
                               1,
                               {},
                               e.what(),
                               {}}
                  : LinkedRows{
                        segment.sequence, segment.firstPosition, segment.count, {}, e.what(), {}});
        }
      } catch (const std::exception&) {
        // The link is gone as well: the next node's wait fails on its own.
      }
    }
    throw;
  }
}

Message NodeHost::runForward(const Message& request, HostedStage& stage,
                             const std::vector<runtime::Segment>& segments, StageLink* next) {
  const json& c = request.control;
  HostedStage* s = &stage;
  const runtime::StageSpec& spec = s->stage->spec();
  const int32_t nEmbd = s->model->config.nEmbd;
  const bool fromLink = boolField(c, "from_link");
  size_t rowCount = 0;
  for (const runtime::Segment& segment : segments) rowCount += size_t(segment.count);
  const size_t rowElements = spec.hasEmbedding ? 1 : size_t(nEmbd);
  const size_t elements = rowCount * rowElements;
  // The rows of a from_link forward: what the previous node pushed down its link, one push per
  // segment, in order (the first stage: the token ids the head's node pushed round the ring).
  std::vector<float> linked;
  std::vector<int32_t> linkedTokens;
  if (fromLink) {
    if (!request.blob.empty()) throw Error("forward: 'from_link' with a blob");
    std::shared_ptr<LinkInbox> inbox;
    {
      std::lock_guard lock(s->linkMutex);
      inbox = s->inbox;
    }
    if (!inbox) throw LinkFailure("forward: no link into this stage (link_accept first)");
    const int32_t waitMs = c.contains("link_wait_ms") ? intField(c, "link_wait_ms", 1, 600000)
                                                      : int32_t(kLinkWaitDefault.count());
    if (!spec.hasEmbedding) linked.reserve(elements);
    for (const runtime::Segment& segment : segments) {
      LinkedRows rows = inbox->take(segment.sequence, segment.firstPosition, segment.count,
                                    std::chrono::milliseconds(waitMs));
      const size_t got = spec.hasEmbedding ? rows.tokens.size() : rows.hidden.size();
      if (got != size_t(segment.count) * rowElements) {
        throw LinkFailure("forward: the link brought " + std::to_string(got) +
                          (spec.hasEmbedding ? " token ids" : " floats") + ", expected " +
                          std::to_string(size_t(segment.count) * rowElements));
      }
      if (spec.hasEmbedding) {
        linkedTokens.insert(linkedTokens.end(), rows.tokens.begin(), rows.tokens.end());
      } else {
        linked.insert(linked.end(), rows.hidden.begin(), rows.hidden.end());
      }
    }
  } else if (request.blob.size() != elements * 4) {
    throw Error(
        "forward: blob of " + std::to_string(request.blob.size()) + " bytes, expected " +
        std::to_string(elements * 4) + " (" + std::to_string(rowCount) +
        (spec.hasEmbedding ? " int32 token ids)" : " x " + std::to_string(nEmbd) + " f32)"));
  }
  runtime::Batch batch;
  batch.segments = segments;
  // Copied out of the blob: its bytes carry no alignment guarantee for int32/float.
  std::vector<int32_t> tokens;
  std::vector<float> hidden;
  if (spec.hasEmbedding && fromLink) {
    tokens = std::move(linkedTokens);
    batch.tokens = tokens;
  } else if (spec.hasEmbedding) {
    tokens.resize(elements);
    std::memcpy(tokens.data(), request.blob.data(), request.blob.size());
    batch.tokens = tokens;
  } else if (fromLink) {
    batch.hidden = linked;
  } else {
    hidden.resize(elements);
    std::memcpy(hidden.data(), request.blob.data(), request.blob.size());
    batch.hidden = hidden;
  }
  const json sample = c.value("sample", json());
  if (!sample.is_null() && next && !spec.hasHead) throw Error("forward: 'sample' with 'to_link'");
  // The ring: the head pushes each segment's sampled token to the first stage.
  const bool ring = next && spec.hasHead;
  if (ring && !sample.is_object()) throw Error("forward: 'to_link' of the head needs 'sample'");
  if (!sample.is_null() && !spec.hasHead) {
    throw Error("forward: 'sample' given to a stage without the head");
  }
  runtime::SamplerParams sp;
  if (!sample.is_null()) sp = samplerFields(sample, "sample");
  // Each segment's own request (kFeatureSegmentSample), else the forward's.
  std::vector<runtime::SamplerParams> segmentSp(segments.size(), sp);
  if (const auto list = c.find("segments"); list != c.end() && sample.is_object()) {
    for (size_t i = 0; i < segments.size(); ++i) {
      const auto own = (*list)[i].find("sample");
      if (own != (*list)[i].end() && !own->is_null()) {
        segmentSp[i] = samplerFields(*own, "segments[" + std::to_string(i) + "].sample");
      }
    }
  }
  // Decoding ahead: the one token given, then its successors, each decoded alone and sampled
  // here, fed back to the stage without a round trip to the coordinator.
  int32_t ahead = 0;
  if (c.contains("decode_ahead")) {
    ahead = intField(c, "decode_ahead", 1, runtime::kMaxDecodeAhead);
    if (!spec.hasEmbedding || !spec.hasHead || fromLink || next) {
      throw Error(
          "forward: 'decode_ahead' needs a stage with the embedding and the head, unlinked");
    }
    if (!sample.is_object()) throw Error("forward: 'decode_ahead' needs 'sample'");
    if (segments.size() != 1 || segments.front().count != 1 ||
        segments.front().logits != runtime::LogitRows::Last || c.contains("segments")) {
      throw Error("forward: 'decode_ahead' takes one segment of one row (\"logits\": \"last\")");
    }
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const runtime::Segment& segment = segments[i];
    if (!sample.is_null() && segment.logits == runtime::LogitRows::None) {
      throw Error("forward: 'sample' needs logits rows (\"logits\": \"last\" or \"all\")");
    }
    if (ring && segment.logits != runtime::LogitRows::Last) {
      throw Error("forward: 'to_link' of the head needs \"logits\": \"last\"");
    }
    // Every row sampled (speculative verification): only greedy, which needs no sampler state.
    if (sample.is_object() && segment.logits == runtime::LogitRows::All &&
        !(segmentSp[i].temperature <= 0)) {
      throw Error("forward: 'sample' of every row (\"logits\": \"all\") needs temperature <= 0");
    }
  }

  runtime::StageOutput out;
  std::vector<LinkedRows> ringRows;  // the ring: each segment's token, pushed once unlocked
  Message m = reply(request, "forward_result");
  m.control["stage_id"] = c["stage_id"];
  ++s->waiting;
  {
    std::lock_guard lock(s->mutex);
    --s->waiting;
    const int64_t t0 = nowNs();
    if (ahead > 0) {
      const runtime::Segment& segment = segments.front();
      const std::vector<int32_t> decoded = runtime::decodeAheadLocally(
          *s->stage, segment.sequence, segment.firstPosition, tokens.front(), ahead, sp);
      s->samplers.erase(segment.sequence);  // the per-token path starts afresh after it
      m.control["tokens"] = decoded;
      s->busyNs += nowNs() - t0;
      s->tokens += ahead;
      return m;
    }
    // The node samples itself (batch.sample stays null). Its sampler per sequence is rebuilt
    // whenever the parameters change — and the coordinator's Session seeds each draw with the
    // base seed plus the position, so in practice a fresh sampler per token: a replay after a
    // recovery draws the same numbers, and the repetition penalty sees no history.
    s->stage->forward(batch, out);
    // What the segments asked for, before it is sliced per segment.
    size_t logitsRows = 0;
    for (const runtime::Segment& segment : segments) {
      logitsRows += segment.logits == runtime::LogitRows::All    ? size_t(segment.count)
                    : segment.logits == runtime::LogitRows::Last ? 1
                                                                 : 0;
    }
    const size_t expected =
        spec.hasHead ? logitsRows * size_t(s->model->config.nVocab) : rowCount * size_t(nEmbd);
    if ((spec.hasHead ? out.logits.size() : out.hidden.size()) != expected) {
      throw Error("forward: the stage returned " +
                  std::to_string(spec.hasHead ? out.logits.size() : out.hidden.size()) +
                  " values, expected " + std::to_string(expected));
    }
    if (sample.is_object()) {
      // Each segment's logits rows, in row order: one token (the last row) or every row's.
      const size_t vocab = size_t(s->model->config.nVocab);
      json perSegment = json::array();
      size_t row = 0;
      for (size_t i = 0; i < segments.size(); ++i) {
        const runtime::Segment& segment = segments[i];
        const runtime::SamplerParams& own = segmentSp[i];
        json sampled = json::array();
        if (segment.logits == runtime::LogitRows::All) {
          runtime::Sampler greedy(own);
          for (int32_t r = 0; r < segment.count; ++r, ++row) {
            sampled.push_back(greedy.sample(std::span(out.logits).subspan(row * vocab, vocab)));
          }
        } else {
          auto& [params, sampler] = s->samplers[segment.sequence];
          if (!sampler || params != own || segment.firstPosition == 0) {
            params = own;
            sampler = std::make_unique<runtime::Sampler>(own);
          }
          const int32_t token = sampler->sample(std::span(out.logits).subspan(row * vocab, vocab));
          sampler->accept(token);
          sampled.push_back(token);
          ++row;
        }
        perSegment.push_back(std::move(sampled));
      }
      if (ring) {
        for (size_t i = 0; i < segments.size(); ++i) {
          const runtime::Segment& segment = segments[i];
          const int32_t token = perSegment[i].front().get<int32_t>();
          ringRows.push_back(LinkedRows{
              segment.sequence, segment.firstPosition + segment.count, 1, {}, {}, {token}});
        }
      }
      if (c.contains("segments")) {
        m.control["segment_tokens"] = std::move(perSegment);
      } else if (segments.front().logits == runtime::LogitRows::All) {
        m.control["tokens"] = std::move(perSegment.front());
      } else {
        m.control["token"] = perSegment.front().front();
      }
    }
    s->busyNs += nowNs() - t0;
    s->tokens += static_cast<int64_t>(rowCount);
  }
  for (const LinkedRows& rows : ringRows) next->push(rows);
  if (next && !ring) {
    m.control["count"] = static_cast<int64_t>(rowCount);
    m.control["forwarded"] = true;
    size_t at = 0;
    for (const runtime::Segment& segment : segments) {
      const size_t n = size_t(segment.count) * size_t(nEmbd);
      next->push(LinkedRows{segment.sequence,
                            segment.firstPosition,
                            segment.count,
                            std::vector<float>(out.hidden.begin() + ptrdiff_t(at),
                                               out.hidden.begin() + ptrdiff_t(at + n)),
                            {},
                            {}});
      at += n;
    }
  } else if (!sample.is_object()) {
    const std::vector<float>& v = spec.hasHead ? out.logits : out.hidden;
    m.blob.resize(v.size() * sizeof(float));
    if (!m.blob.empty()) std::memcpy(m.blob.data(), v.data(), m.blob.size());
    m.control["count"] = static_cast<int64_t>(rowCount);
  }
  return m;
}

Message NodeHost::linkAccept(const Message& request, const Session& session) {
  const json& c = request.control;
  const json stageId = c.value("stage_id", json());
  auto s = findStage(stageId, session);
  const std::string from = stringField(c, "from_device");
  // A device ID as identity.h spells them; anything else could never present a certificate.
  if (from.empty() || from.size() > 128 || !std::all_of(from.begin(), from.end(), [](char ch) {
        return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
      })) {
    throw Error("link_accept: field 'from_device' missing or not a device ID");
  }
  // The first stage's inbox takes token ids (the ring from the head's node), any other hidden
  // states.
  auto inbox =
      std::make_shared<LinkInbox>(s->model->config.nEmbd, s->stage->spec().maxBatch,
                                  s->stage->spec().hasEmbedding ? s->model->config.nVocab : 0);
  const std::string key = stageKey(stageId);
  {
    std::lock_guard lock(s->linkMutex);
    if (s->inbox) s->inbox->close("the stage was linked again");
    s->inbox = inbox;
  }
  const std::string route = m_routes.open(session.serial, key, from, inbox);
  Message m = reply(request, "link_accepted");
  m.control["stage_id"] = stageId;
  m.control["route"] = route;
  return m;
}

Message NodeHost::linkConnect(const Message& request, const Session& session) {
  const json& c = request.control;
  const json stageId = c.value("stage_id", json());
  auto s = findStage(stageId, session);
  const std::string address = stringField(c, "address");
  const std::string device = stringField(c, "device_id");
  const std::string route = stringField(c, "route");
  if (address.empty() || address.size() > 300 || device.empty() || device.size() > 128 ||
      route.empty() || route.size() > 64) {
    throw Error("link_connect: fields 'address', 'device_id' and 'route' are required");
  }
  {
    // The old link goes first: one link per stage.
    std::lock_guard lock(s->linkMutex);
    s->next.reset();
  }
  if (!m_options.linkConnector) throw LinkFailure("link_connect: this node opens no links");
  std::unique_ptr<Connection> connection;
  int64_t rttNs = INT64_MAX;
  try {
    connection = m_options.linkConnector(address, device);
    Message hello;
    hello.control = {{"op", "link_hello"}, {"route", route}};
    connection->send(hello, kLinkConnectTimeout);
    const Message answer = connection->receive(kLinkConnectTimeout);
    if (answer.control.value("op", "") != "link_ready") {
      throw Error(answer.control.value("message", std::string("refused")));
    }
    // The link's round trip, the least of a few pings: the planner's latency for this pair of
    // nodes (the coordinator's round trips to each say nothing about it).
    for (int i = 0; i < kLinkPings; ++i) {
      Message ping;
      ping.control = {{"op", "link_ping"}};
      const int64_t sent = nowNs();
      connection->send(ping, kLinkConnectTimeout);
      if (connection->receive(kLinkConnectTimeout).control.value("op", "") != "link_pong") {
        throw Error("the link's ping was not answered");
      }
      rttNs = std::min(rttNs, nowNs() - sent);
    }
  } catch (const std::exception& e) {
    throw LinkFailure("link_connect: cannot link to " + address + ": " + e.what());
  }
  auto link = std::make_shared<StageLink>(std::move(connection), route, address);
  {
    std::lock_guard lock(s->linkMutex);
    s->next = std::move(link);
  }
  Message m = reply(request, "ok");
  m.control["rtt_ms"] = static_cast<double>(rttNs) / 1e6;
  return m;
}

json NodeHost::linksOf(const std::string& owner) const {
  json out = json::array();
  std::lock_guard lock(m_mutex);
  for (const auto& [key, s] : m_stages) {
    if (s->owner != owner) continue;  // another coordinator's deployment is none of its business
    std::lock_guard link(s->linkMutex);
    if (!s->next) continue;
    out.push_back({{"stage_id", json::parse(key.second)},
                   {"first_layer", s->stage->spec().firstLayer},
                   {"last_layer", s->stage->spec().lastLayer},
                   {"to_device", s->next->peerDeviceId()},
                   {"address", s->next->address()},
                   {"open", s->next->isOpen()}});
  }
  return out;
}

void NodeHost::closeLinks(const StageKey& key, HostedStage& stage, const std::string& why) {
  m_routes.revoke(key.first, key.second, why);
  std::lock_guard lock(stage.linkMutex);
  if (stage.inbox) stage.inbox->close(why);
  stage.next.reset();
}

void NodeHost::serveLink(Connection& connection, const Message& hello,
                         const std::atomic<bool>& stop) {
  const std::string peer = connection.peerDeviceId();
  std::string token;
  std::shared_ptr<LinkInbox> inbox;
  int32_t nEmbd = 0, maxBatch = 0;
  try {
    token = stringField(hello.control, "route");
    inbox = m_routes.bind(token, peer, connection);
    nEmbd = inbox->nEmbd();
    maxBatch = inbox->maxBatch();
    Message ready;
    ready.control = {{"op", "link_ready"}};
    connection.send(ready, kLinkConnectTimeout);
  } catch (const std::exception& e) {
    try {
      Message refused;
      refused.control = {{"op", "error"}, {"message", e.what()}};
      connection.send(refused, std::chrono::milliseconds(1000));
    } catch (const std::exception&) {
    }
    if (inbox) m_routes.unbind(token, connection, "link refused");
    connection.close();
    return;
  }
  std::string why = "the link from " + connection.peerAddress() + " closed";
  while (!stop.load() && connection.isOpen()) {
    Message m;
    try {
      m = connection.receive(kPollInterval);
    } catch (const TransportError& e) {
      if (e.kind() == TransportError::Kind::Timeout) continue;
      why = std::string("the link from the previous node failed: ") + e.what();
      break;
    }
    try {
      const json& c = m.control;
      const int32_t vocab = inbox->tokenVocab();
      if (c.value("op", "") == "link_ping") {
        Message pong;
        pong.control = {{"op", "link_pong"}};
        connection.send(pong, kLinkConnectTimeout);
        continue;
      }
      if (c.value("op", "") != (vocab > 0 ? "link_tokens" : "link_hidden")) {
        throw Error("unexpected op on a link");
      }
      LinkedRows rows;
      rows.sequence = intField(c, "sequence", 0, INT32_MAX);
      rows.firstPosition = intField(c, "first_position", 0, INT32_MAX);
      rows.count = intField(c, "count", 1, maxBatch);
      if (const auto it = c.find("error"); it != c.end()) {
        rows.error = it->is_string() ? it->get<std::string>().substr(0, 1000) : "failed";
        if (rows.error.empty()) rows.error = "failed";
      } else if (vocab > 0) {
        if (m.blob.size() != size_t(rows.count) * 4) throw Error("link_tokens: wrong blob size");
        rows.tokens.resize(size_t(rows.count));
        std::memcpy(rows.tokens.data(), m.blob.data(), m.blob.size());
        for (int32_t t : rows.tokens) {
          if (t < 0 || t >= vocab) throw Error("link_tokens: token id out of range");
        }
      } else {
        const size_t elements = size_t(rows.count) * size_t(nEmbd);
        if (m.blob.size() != elements * 4) throw Error("link_hidden: wrong blob size");
        rows.hidden.resize(elements);
        std::memcpy(rows.hidden.data(), m.blob.data(), m.blob.size());
      }
      inbox->push(std::move(rows), kLinkWaitDefault);
    } catch (const std::exception& e) {
      // A misbehaving or stuck link is dropped; the stage's forwards then fail (link_failed)
      // and the coordinator relays.
      why = std::string("link from the previous node dropped: ") + e.what();
      break;
    }
  }
  m_routes.unbind(token, connection, why);
  connection.close();
}

void NodeHost::sampleTelemetry() {
  std::vector<std::shared_ptr<HostedStage>> stages;
  {
    std::lock_guard lock(m_mutex);
    for (const auto& [key, s] : m_stages) stages.push_back(s);
  }
  const int64_t now = nowNs();
  std::vector<DeviceTelemetry> out;
  const std::string nodeId = deviceId();
  for (const auto& d : m_devices) {
    DeviceTelemetry t;
    t.nodeId = nodeId;
    t.nodeName = m_options.name;
    t.deviceId = d.id;
    t.deviceName = d.name;
    t.backend = d.backend;
    t.memoryTotal = d.memoryTotal;
    double busy = 0, tokens = 0;
    for (const auto& s : stages) {
      if (s->deviceId != d.id) continue;
      const int64_t interval = std::max<int64_t>(1, now - s->lastSampleNs);
      const int64_t busyNs = s->busyNs.load(), tok = s->tokens.load();
      busy += double(busyNs - s->lastBusyNs) / double(interval);
      tokens += double(tok - s->lastTokens) * 1e9 / double(interval);
      s->lastBusyNs = busyNs;
      s->lastTokens = tok;
      s->lastSampleNs = now;
      t.queueDepth += s->waiting.load();
      t.memoryUsed += s->memoryBytes;
      const auto& sp = s->stage->spec();
      if (t.firstLayer < 0 || sp.firstLayer < t.firstLayer) t.firstLayer = sp.firstLayer;
      t.lastLayer = std::max(t.lastLayer, sp.lastLayer);
    }
    t.busyFraction = std::min(1.0, busy);
    t.tokensPerS = tokens;
    out.push_back(std::move(t));
  }
  std::lock_guard lock(m_mutex);
  m_telemetry = std::move(out);
}

Message NodeHost::telemetry() const {
  Message m;
  std::lock_guard lock(m_mutex);
  m.control = {{"op", "telemetry"}, {"devices", m_telemetry}};
  return m;
}

}  // namespace shoal::lan
