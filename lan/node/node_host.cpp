#include "lan/node/node_host.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/sampler.h"
#include "lan/node/shard_receiver.h"
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

// A required integer field within [lo, hi]; shoal::Error naming the op and field otherwise.
int32_t intField(const json& c, const char* field, int64_t lo, int64_t hi) {
  const auto it = c.find(field);
  if (it == c.end() || !it->is_number_integer()) {
    throw Error(c.value("op", "?") + ": field '" + field + "' missing or not an integer");
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    throw Error(c.value("op", "?") + ": field '" + field + "' = " + std::to_string(v) +
                " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int32_t>(v);
}

bool boolField(const json& c, const char* field) {
  const auto it = c.find(field);
  return it != c.end() && it->is_boolean() && it->get<bool>();
}

std::string stageKey(const json& stageId) {
  if (!stageId.is_string() && !stageId.is_number_integer()) {
    throw Error("field 'stage_id' missing or not a string/integer");
  }
  return stageId.dump();
}

Message reply(const Message& request, const std::string& op) {
  Message m;
  m.control = {{"op", op}};
  if (request.control.contains("id")) m.control["id"] = request.control["id"];
  return m;
}

bool isHexSha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char ch : s) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  }
  return true;
}

// The f16 KV cache a stage allocates (and zero-fills) at creation.
uint64_t kvCacheBytes(const model::ModelConfig& c, const runtime::StageSpec& spec) {
  return uint64_t(spec.lastLayer - spec.firstLayer) * uint64_t(spec.maxSequences) *
         uint64_t(spec.contextLength) * 2 * uint64_t(c.kvDim()) * sizeof(uint16_t);
}

// Bytes a stage occupies: its tensors (where they are mapped) plus its f16 KV cache.
uint64_t stageBytes(const model::ModelConfig& c, const model::ModelWeights& w,
                    const runtime::StageSpec& spec) {
  const auto bytes = [](const gguf::TensorInfo* t) { return t ? uint64_t(t->nbytes) : 0; };
  uint64_t total = 0;
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    const model::LayerWeights& l = w.layers[size_t(i)];
    for (const auto* t : {l.attnNorm, l.wq, l.wk, l.wv, l.wo, l.bq, l.bk, l.bv, l.ffnNorm, l.wGate,
                          l.wUp, l.wDown}) {
      total += bytes(t);
    }
  }
  if (spec.hasEmbedding) total += bytes(w.tokenEmbd);
  if (spec.hasHead) {
    total += bytes(w.outputNorm);
    if (w.output != w.tokenEmbd || !spec.hasEmbedding) total += bytes(w.output);
  }
  return total + kvCacheBytes(c, spec);
}

}  // namespace

// A model file (whole model or shard) mapped once and shared by the stages built from it.
struct NodeHost::LoadedModel {
  gguf::File file;
  model::ModelConfig config;
  model::ModelWeights weights;
};

struct NodeHost::HostedStage {
  std::shared_ptr<LoadedModel> model;
  std::unique_ptr<runtime::Stage> stage;
  std::string deviceId;
  uint64_t memoryBytes = 0;  // stageBytes(), for telemetry
  std::mutex mutex;          // one forward/truncate at a time
  // Samplers of the head, per sequence; rebuilt when a sequence restarts or the params change.
  std::map<int32_t, std::pair<runtime::SamplerParams, std::unique_ptr<runtime::Sampler>>> samplers;
  // Telemetry counters (written under `mutex`, read by sampleTelemetry).
  std::atomic<int64_t> busyNs{0};
  std::atomic<int64_t> tokens{0};
  std::atomic<int32_t> waiting{0};
  int64_t lastBusyNs = 0, lastTokens = 0, lastSampleNs = 0;
};

struct NodeHost::Session {
  std::vector<std::string> stageKeys;  // stages this connection loaded
  // A stage waiting for streamed weights.
  struct Pending {
    json stageId;
    std::string deviceId;
    std::string sha256;
    runtime::StageSpec spec;
    std::unique_ptr<ShardReceiver> receiver;
    std::filesystem::path shardFile;
    Clock::time_point start;
  };
  std::optional<Pending> pending;
};

NodeHost::NodeHost(NodeHostOptions options, std::vector<std::unique_ptr<runtime::Backend>> backends,
                   std::shared_ptr<const ModelCatalog> catalog)
    : m_options(std::move(options)), m_catalog(std::move(catalog)) {
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

void NodeHost::serve(Connection& connection, const std::atomic<bool>& stop) {
  Session session;
  while (!stop.load() && connection.isOpen()) {
    Message request;
    try {
      request = connection.receive(kPollInterval);
    } catch (const TransportError& e) {
      if (e.kind() == TransportError::Kind::Timeout) continue;
      break;
    }
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
  for (const auto& key : session.stageKeys) unload(key);
}

std::optional<Message> NodeHost::handle(const Message& request, Session& session) {
  const std::string op = request.control.value("op", "");
  try {
    if (op == "node_info") {
      Message m = nodeInfo();
      m.control["id"] = request.control.value("id", json());
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
      if (!session.pending ||
          request.control.value("stage_id", json()) != session.pending->stageId) {
        throw Error("weights_chunk: no stage of this connection is waiting for weights");
      }
      try {
        session.pending->receiver->addChunk(request.control, request.blob);
      } catch (...) {
        session.pending.reset();  // a bad stream is dropped whole; the coordinator starts over
        throw;
      }
      m_weightBytesReceived += request.blob.size();
      return std::nullopt;
    }
    if (op == "weights_done") return weightsDone(request, session);
    if (op == "forward") return forward(request);
    if (op == "truncate") {
      auto s = findStage(request.control.value("stage_id", json()));
      const int32_t seq =
          intField(request.control, "sequence", 0, s->stage->spec().maxSequences - 1);
      const int32_t from = intField(request.control, "from_position", 0, INT32_MAX);
      std::lock_guard lock(s->mutex);
      s->stage->truncate(seq, from);
      if (from == 0) s->samplers.erase(seq);
      return reply(request, "ok");
    }
    if (op == "unload_stage") {
      const std::string key = stageKey(request.control.value("stage_id", json()));
      unload(key);
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
    dev.memoryFree = d.memoryFree;
    dev.bandwidthBytesPerS = d.bandwidthBytesPerS;
    dev.flopsPerS = d.flopsPerS;
    info.devices.push_back(std::move(dev));
  }
  for (const auto& lm : m_catalog->models()) info.models.push_back({lm.file, lm.sha256, lm.size});
  Message m;
  m.control = nodeInfoToJson(info);
  m.control["weight_bytes_received"] = m_weightBytesReceived.load();
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
  auto m = std::make_shared<LoadedModel>(LoadedModel{gguf::File::open(local.path), {}, {}});
  m->config = model::ModelConfig::fromGguf(m->file);
  m->weights = model::ModelWeights::bind(m->file, m->config);
  std::lock_guard lock(m_mutex);
  m_openModels[local.sha256] = m;
  return m;
}

void NodeHost::install(const json& stageId, std::shared_ptr<HostedStage> stage, Session& session) {
  const std::string key = stageKey(stageId);
  stage->lastSampleNs = nowNs();
  {
    std::lock_guard lock(m_mutex);
    m_stages[key] = std::move(stage);
  }
  if (std::find(session.stageKeys.begin(), session.stageKeys.end(), key) ==
      session.stageKeys.end()) {
    session.stageKeys.push_back(key);
  }
}

void NodeHost::unload(const std::string& key) {
  std::shared_ptr<HostedStage> gone;
  {
    std::lock_guard lock(m_mutex);
    const auto it = m_stages.find(key);
    if (it == m_stages.end()) return;
    gone = std::move(it->second);
    m_stages.erase(it);
  }
  // Freed here, outside the map lock; a forward still running on it holds its own reference.
}

Message NodeHost::loadStage(const Message& request, Session& session) {
  const auto start = Clock::now();
  const json& c = request.control;
  const json stageId = c.value("stage_id", json());
  stageKey(stageId);  // validates
  const json& modelRef = c.value("model", json::object());
  const std::string sha = modelRef.is_object() ? modelRef.value("sha256", "") : "";
  if (!isHexSha256(sha)) throw Error("load_stage: model.sha256 is not 64 lowercase hex digits");
  const std::string deviceId = c.value("device", "");
  runtime::Backend& backend = backendFor(deviceId);
  runtime::StageSpec spec;
  spec.firstLayer = intField(c, "first_layer", 0, 1 << 16);
  spec.lastLayer = intField(c, "last_layer", spec.firstLayer, 1 << 16);
  spec.hasEmbedding = boolField(c, "has_embedding");
  spec.hasHead = boolField(c, "has_head");
  spec.contextLength = intField(c, "context_length", 1, 1 << 24);
  spec.maxSequences = intField(c, "max_sequences", 1, 4096);
  if (c.contains("max_batch")) spec.maxBatch = intField(c, "max_batch", 1, 1 << 16);

  // The stage id is reused: replace what it held.
  unload(stageKey(stageId));
  session.pending.reset();

  const auto ready = [&](std::shared_ptr<LoadedModel> model, const char* source) {
    checkFits(deviceId, model->config, spec);
    auto hosted = std::make_shared<HostedStage>();
    const runtime::ModelSource src{&model->file, &model->config, &model->weights};
    hosted->stage = backend.createStage(deviceId, src, spec);
    hosted->memoryBytes = stageBytes(model->config, model->weights, spec);
    hosted->model = std::move(model);
    hosted->deviceId = deviceId;
    install(stageId, std::move(hosted), session);
    Message m = reply(request, "stage_ready");
    m.control["stage_id"] = stageId;
    m.control["source"] = source;
    m.control["load_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    return m;
  };

  if (const auto local = m_catalog->findBySha256(sha))
    return ready(openLocalModel(*local), "local-file");

  const auto shardFile = shardPath(m_options.configDir, sha, spec.firstLayer, spec.lastLayer);
  std::error_code ec;
  if (std::filesystem::is_regular_file(shardFile, ec)) {
    try {
      auto m = std::make_shared<LoadedModel>(LoadedModel{gguf::File::open(shardFile), {}, {}});
      m->config = model::ModelConfig::fromGguf(m->file);
      m->weights = model::ModelWeights::bindRange(m->file, m->config, spec.firstLayer,
                                                  spec.lastLayer, spec.hasEmbedding, spec.hasHead);
      return ready(std::move(m), "shard-cache");
    } catch (const Error& e) {
      // A shard cut for another role of the same range (or damaged): fetch the weights again.
      std::fprintf(stderr, "shoal-node: cached shard %s not usable (%s); asking for weights\n",
                   shardFile.string().c_str(), e.what());
    }
  }

  if (request.blob.empty()) {
    throw Error("load_stage: this node has neither model " + sha +
                " nor a cached shard, and the request carries no metadata to stream it with");
  }
  const gguf::File meta = gguf::File::fromBuffer(request.blob, "load_stage metadata");
  const model::ModelConfig config = model::ModelConfig::fromGguf(meta);
  if (spec.lastLayer > config.nLayer) {
    throw Error("load_stage: last_layer " + std::to_string(spec.lastLayer) + " beyond the " +
                std::to_string(config.nLayer) + " layers of model " + sha);
  }
  checkFits(deviceId, config, spec);  // before any weight is sent
  StageTensorList names =
      stageTensorNames(config, spec.firstLayer, spec.lastLayer, spec.hasEmbedding, spec.hasHead);
  Session::Pending p;
  p.stageId = stageId;
  p.deviceId = deviceId;
  p.sha256 = sha;
  p.spec = spec;
  p.shardFile = shardFile;
  p.start = start;
  p.receiver =
      std::make_unique<ShardReceiver>(shardFile, meta.metadata(), names, m_options.maxShardBytes);
  session.pending = std::move(p);
  Message m = reply(request, "need_weights");
  m.control["stage_id"] = stageId;
  m.control["tensors"] = names.required;
  m.control["optional"] = names.optional;
  return m;
}

Message NodeHost::weightsDone(const Message& request, Session& session) {
  if (!session.pending || request.control.value("stage_id", json()) != session.pending->stageId) {
    throw Error("weights_done: no stage of this connection is waiting for weights");
  }
  Session::Pending p = std::move(*session.pending);
  session.pending.reset();
  p.receiver->finish();
  p.receiver.reset();
  runtime::Backend& backend = backendFor(p.deviceId);
  auto m = std::make_shared<LoadedModel>(LoadedModel{gguf::File::open(p.shardFile), {}, {}});
  m->config = model::ModelConfig::fromGguf(m->file);
  m->weights = model::ModelWeights::bindRange(
      m->file, m->config, p.spec.firstLayer, p.spec.lastLayer, p.spec.hasEmbedding, p.spec.hasHead);
  auto hosted = std::make_shared<HostedStage>();
  const runtime::ModelSource src{&m->file, &m->config, &m->weights};
  hosted->stage = backend.createStage(p.deviceId, src, p.spec);
  hosted->memoryBytes = stageBytes(m->config, m->weights, p.spec);
  hosted->model = std::move(m);
  hosted->deviceId = p.deviceId;
  install(p.stageId, std::move(hosted), session);
  Message r = reply(request, "stage_ready");
  r.control["stage_id"] = p.stageId;
  r.control["source"] = "streamed";
  r.control["load_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - p.start).count();
  return r;
}

void NodeHost::checkFits(const std::string& deviceId, const model::ModelConfig& config,
                         const runtime::StageSpec& spec) const {
  // A peer is trusted but may still ask for the impossible: the cache is zero-filled at
  // creation, so an oversized request would be an out-of-memory kill, not an error reply.
  const uint64_t kv = kvCacheBytes(config, spec);
  for (const auto& d : m_devices) {
    if (d.id == deviceId && d.memoryTotal > 0 && kv > d.memoryTotal) {
      throw Error("load_stage: the KV cache of layers [" + std::to_string(spec.firstLayer) + ", " +
                  std::to_string(spec.lastLayer) + ") for " + std::to_string(spec.maxSequences) +
                  " sequence(s) x " + std::to_string(spec.contextLength) + " positions needs " +
                  std::to_string(kv) + " bytes; device " + deviceId + " has " +
                  std::to_string(d.memoryTotal));
    }
  }
}

std::shared_ptr<NodeHost::HostedStage> NodeHost::findStage(const json& stageId) const {
  const std::string key = stageKey(stageId);
  std::lock_guard lock(m_mutex);
  const auto it = m_stages.find(key);
  if (it == m_stages.end()) throw Error("no stage " + key + " is loaded on this node");
  return it->second;
}

Message NodeHost::forward(const Message& request) {
  const json& c = request.control;
  auto s = findStage(c.value("stage_id", json()));
  const runtime::StageSpec& spec = s->stage->spec();
  const int32_t nEmbd = s->model->config.nEmbd;
  runtime::StageInput in;
  in.sequence = intField(c, "sequence", 0, spec.maxSequences - 1);
  in.firstPosition = intField(c, "first_position", 0, spec.contextLength - 1);
  in.count = intField(c, "count", 1, spec.maxBatch);
  const size_t elements = spec.hasEmbedding ? size_t(in.count) : size_t(in.count) * size_t(nEmbd);
  if (request.blob.size() != elements * 4) {
    throw Error(
        "forward: blob of " + std::to_string(request.blob.size()) + " bytes, expected " +
        std::to_string(elements * 4) + " (" + std::to_string(in.count) +
        (spec.hasEmbedding ? " int32 token ids)" : " x " + std::to_string(nEmbd) + " f32)"));
  }
  // Copied out of the blob: its bytes carry no alignment guarantee for int32/float.
  std::vector<int32_t> tokens;
  std::vector<float> hidden;
  if (spec.hasEmbedding) {
    tokens.resize(elements);
    std::memcpy(tokens.data(), request.blob.data(), request.blob.size());
    in.tokens = tokens;
  } else {
    hidden.resize(elements);
    std::memcpy(hidden.data(), request.blob.data(), request.blob.size());
    in.hidden = hidden;
  }
  const json sample = c.value("sample", json());
  if (!sample.is_null() && !spec.hasHead) {
    throw Error("forward: 'sample' given to a stage without the head");
  }
  runtime::SamplerParams sp;
  if (sample.is_object()) {
    sp.temperature = sample.value("temperature", sp.temperature);
    sp.topP = sample.value("top_p", sp.topP);
    sp.topK = sample.value("top_k", sp.topK);
    sp.minP = sample.value("min_p", sp.minP);
    sp.repeatPenalty = sample.value("repeat_penalty", sp.repeatPenalty);
    sp.seed = sample.value("seed", sp.seed);
  } else if (!sample.is_null()) {
    throw Error("forward: 'sample' must be null or an object");
  }

  runtime::StageOutput out;
  Message m = reply(request, "forward_result");
  m.control["stage_id"] = c["stage_id"];
  ++s->waiting;
  {
    std::lock_guard lock(s->mutex);
    --s->waiting;
    const int64_t t0 = nowNs();
    s->stage->forward(in, out);
    if (sample.is_object()) {
      auto& [params, sampler] = s->samplers[in.sequence];
      const bool sameParams = sampler && params.temperature == sp.temperature &&
                              params.topP == sp.topP && params.topK == sp.topK &&
                              params.minP == sp.minP && params.repeatPenalty == sp.repeatPenalty &&
                              params.seed == sp.seed;
      if (!sameParams || in.firstPosition == 0) {
        params = sp;
        sampler = std::make_unique<runtime::Sampler>(sp);
      }
      const int32_t token = sampler->sample(out.logits);
      sampler->accept(token);
      m.control["token"] = token;
    }
    s->busyNs += nowNs() - t0;
    s->tokens += in.count;
  }
  if (!sample.is_object()) {
    const std::vector<float>& v = spec.hasHead ? out.logits : out.hidden;
    m.blob.resize(v.size() * sizeof(float));
    std::memcpy(m.blob.data(), v.data(), m.blob.size());
    m.control["count"] = in.count;
  }
  return m;
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
