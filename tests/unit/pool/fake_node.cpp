#include "tests/unit/pool/fake_node.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"
#include "engine/runtime/decode_ahead.h"
#include "engine/runtime/sampler.h"
#include "lan/pool/forward_fields.h"
#include "lan/pool/sha256.h"

namespace shoal::lan::testing {

using nlohmann::json;

FakeNode::FakeNode(FakeNodeConfig config, const model::Model& model, const std::string& modelSha256,
                   runtime::Backend& backend)
    : m_config(std::move(config)), m_model(model), m_modelSha256(modelSha256), m_backend(backend) {}

NodeInfo FakeNode::info() const {
  NodeInfo info;
  info.name = m_config.name;
  info.deviceId = m_config.deviceId;
  NodeDevice d;
  d.id = "cpu0";
  d.backend = "cpu";
  d.name = "fake cpu";
  d.type = "cpu";
  d.memoryTotal = m_config.memoryBytes;
  d.memoryFree = m_config.memoryBytes;
  d.bandwidthBytesPerS = 2e10;
  d.flopsPerS = 1e11;
  info.devices.push_back(d);
  if (m_config.hasModelFile) {
    info.models.push_back(
        NodeModel{m_model.path().filename().string(), m_modelSha256, m_model.file().fileSize()});
  }
  for (const auto& [first, last] : m_config.cachedRanges) {
    info.shards.push_back({m_modelSha256, first, last});
  }
  if (m_config.decodeAhead) info.features.push_back(kFeatureDecodeAhead);
  if (m_config.segmentSample) info.features.push_back(kFeatureSegmentSample);
  return info;
}

Message FakeNode::reply(const Message& request, json control, std::vector<uint8_t> blob) {
  Message m;
  m.control = std::move(control);
  if (request.control.contains("id")) m.control["id"] = request.control.at("id");
  m.blob = std::move(blob);
  return m;
}

std::vector<Message> FakeNode::handle(const Message& request) {
  const std::string op = request.control.at("op").get<std::string>();
  try {
    if (op == "node_info") return {reply(request, nodeInfoToJson(info()))};
    if (op == "ping") return {reply(request, {{"op", "pong"}, {"t", request.control.at("t")}})};
    if (op == "bandwidth_probe") return {reply(request, {{"op", "pong"}})};
    if (op == "load_stage") return {loadStage(request)};
    if (op == "weights_chunk") {
      Pending& p = m_pending.at(request.control.at("stage_id").get<std::string>());
      const std::string tensor = request.control.at("tensor").get<std::string>();
      const gguf::TensorInfo* info = m_model.file().findTensor(tensor);
      if (!info ||
          request.control.at("type").get<uint32_t>() != static_cast<uint32_t>(info->type) ||
          request.control.at("dims").get<std::vector<int64_t>>() != info->dims) {
        throw Error("weights_chunk " + tensor + ": unknown tensor or wrong type/dims");
      }
      std::vector<uint8_t>& bytes = p.received[tensor];
      if (request.control.at("offset").get<size_t>() != bytes.size()) {
        throw Error("weights_chunk " + tensor + ": offset out of order");
      }
      bytes.insert(bytes.end(), request.blob.begin(), request.blob.end());
      if (request.control.contains("sha256")) {
        if (bytes.size() != request.control.at("total").get<size_t>() ||
            sha256Hex(bytes) != request.control.at("sha256").get<std::string>()) {
          throw Error("weights_chunk " + tensor + ": size or sha256 mismatch");
        }
        streamedBytes += bytes.size();
      }
      return {};
    }
    if (op == "weights_done") {
      const std::string stageId = request.control.at("stage_id").get<std::string>();
      Pending& p = m_pending.at(stageId);
      for (const std::string& t : p.tensors) {
        const gguf::TensorInfo* info = m_model.file().findTensor(t);
        const auto it = p.received.find(t);
        if (it == p.received.end() || it->second.size() != info->nbytes ||
            std::memcmp(it->second.data(), info->data, info->nbytes) != 0) {
          throw Error("weights_done: tensor " + t + " missing or different");
        }
      }
      return {finishLoad(p.load, request, stageId, "streamed")};
    }
    if (op == "forward") {
      if (m_config.dieAfterForwards >= 0 && forwards >= m_config.dieAfterForwards) {
        dead = true;  // like kill -9: no reply, the connection resets
        return {};
      }
      return {forward(request)};
    }
    if (op == "truncate") {
      m_stages.at(request.control.at("stage_id").get<std::string>())
          ->truncate(request.control.at("sequence").get<int32_t>(),
                     request.control.at("from_position").get<int32_t>());
      return {reply(request, {{"op", "ok"}})};
    }
    if (op == "unload_stage") {
      ++unloads;
      m_stages.erase(request.control.at("stage_id").get<std::string>());
      return {reply(request, {{"op", "ok"}})};
    }
    if (op == "telemetry") {
      json devices = json::array();
      devices.push_back({{"deviceId", "cpu0"},
                         {"deviceName", "fake cpu"},
                         {"backend", "cpu"},
                         {"busyFraction", 0.25},
                         {"memoryTotal", m_config.memoryBytes},
                         {"queueDepth", 0}});
      return {reply(request, {{"op", "telemetry"}, {"devices", devices}})};
    }
    return {reply(request, {{"op", "error"}, {"message", "unknown op " + op}})};
  } catch (const std::exception& e) {
    return {reply(request, {{"op", "error"}, {"message", e.what()}})};
  }
}

Message FakeNode::loadStage(const Message& request) {
  const json& c = request.control;
  const std::string stageId = c.at("stage_id").get<std::string>();
  if (c.at("model").at("sha256").get<std::string>() != m_modelSha256) {
    throw Error("load_stage: unknown model");
  }
  if (m_config.hasModelFile) return finishLoad(c, request, stageId, "local-file");
  const std::pair<int32_t, int32_t> range{c.at("first_layer").get<int32_t>(),
                                          c.at("last_layer").get<int32_t>()};
  if (std::find(m_config.cachedRanges.begin(), m_config.cachedRanges.end(), range) !=
      m_config.cachedRanges.end()) {
    return finishLoad(c, request, stageId, "shard-cache");
  }
  // The stage's layers are a tensor-less GGUF of the model's metadata away from a shard.
  const gguf::File meta = gguf::File::fromBuffer(request.blob, "load_stage metadata");
  if (!meta.find("general.architecture") || !meta.tensors().empty()) {
    throw Error("load_stage: metadata blob is not a tensor-less GGUF");
  }
  Pending p;
  p.load = c;
  const int first = c.at("first_layer").get<int>(), last = c.at("last_layer").get<int>();
  const bool embedding = c.at("has_embedding").get<bool>(), head = c.at("has_head").get<bool>();
  json optional = json::array();
  for (const gguf::TensorInfo& t : m_model.file().tensors()) {
    bool wanted = false;
    for (int l = first; l < last && !wanted; ++l) {
      wanted = t.name.rfind("blk." + std::to_string(l) + ".", 0) == 0;
    }
    if (embedding && t.name == "token_embd.weight") wanted = true;
    if (head && t.name == "output_norm.weight") wanted = true;
    if (wanted) p.tensors.push_back(t.name);
  }
  // As the real node: output.weight, and the embedding for a head without it, only if present.
  if (head) {
    optional.push_back("output.weight");
    if (!embedding) optional.push_back("token_embd.weight");
    const gguf::TensorInfo* output = m_model.file().findTensor("output.weight");
    p.tensors.push_back(output ? "output.weight" : "token_embd.weight");
    if (embedding && !output) p.tensors.pop_back();  // already required
  }
  json names = json::array();
  for (const std::string& n : p.tensors) {
    if (!(head && (n == "output.weight" || (!embedding && n == "token_embd.weight")))) {
      names.push_back(n);
    }
  }
  m_pending[stageId] = std::move(p);
  return reply(
      request,
      {{"op", "need_weights"}, {"stage_id", stageId}, {"tensors", names}, {"optional", optional}});
}

Message FakeNode::finishLoad(const json& c, const Message& request, const std::string& stageId,
                             const char* source) {
  runtime::StageSpec spec;
  spec.firstLayer = c.at("first_layer").get<int32_t>();
  spec.lastLayer = c.at("last_layer").get<int32_t>();
  spec.hasEmbedding = c.at("has_embedding").get<bool>();
  spec.hasHead = c.at("has_head").get<bool>();
  spec.contextLength = c.at("context_length").get<int32_t>();
  spec.maxSequences = c.at("max_sequences").get<int32_t>();
  runtime::ModelSource src{&m_model.file(), &m_model.config(), &m_model.weights()};
  m_stages[stageId] = m_backend.createStage("cpu0", src, spec);
  m_pending.erase(stageId);
  ++loads;
  loadSources.emplace_back(source);
  return reply(
      request,
      {{"op", "stage_ready"}, {"stage_id", stageId}, {"load_ms", 1.0}, {"source", source}});
}

Message FakeNode::forward(const Message& request) {
  ++forwards;
  const json& c = request.control;
  runtime::Stage& stage = *m_stages.at(c.at("stage_id").get<std::string>());
  // One segment at the top level, or several in "segments" (run as one batch, as NodeHost does).
  std::vector<runtime::Segment> segments;
  for (const json& f : c.contains("segments") ? c.at("segments") : json::array({c})) {
    runtime::Segment segment;
    segment.sequence = f.at("sequence").get<int32_t>();
    segment.firstPosition = f.at("first_position").get<int32_t>();
    segment.count = f.at("count").get<int32_t>();
    segment.logits = parseLogitRows(f.value("logits", "last")).value();
    segment.decodeOrder = f.value("decode_order", false);
    segments.push_back(segment);
  }
  if (segments.size() > 1) ++batchedForwards;
  runtime::Batch batch;
  batch.segments = segments;
  std::vector<int32_t> tokens;
  std::vector<float> hidden;
  if (stage.spec().hasEmbedding) {
    tokens.resize(request.blob.size() / 4);
    std::memcpy(tokens.data(), request.blob.data(), request.blob.size());
    batch.tokens = tokens;
  } else {
    hidden.resize(request.blob.size() / 4);
    std::memcpy(hidden.data(), request.blob.data(), request.blob.size());
    batch.hidden = hidden;
  }
  auto paramsOf = [](const json& sample) {
    runtime::SamplerParams p;
    p.temperature = sample.at("temperature").get<float>();
    p.topK = sample.at("top_k").get<int32_t>();
    p.topP = sample.at("top_p").get<float>();
    p.minP = sample.at("min_p").get<float>();
    p.seed = sample.at("seed").get<uint64_t>();
    return p;
  };
  runtime::SamplerParams params;
  if (stage.spec().hasHead && !c.at("sample").is_null()) params = paramsOf(c.at("sample"));
  // Each segment's own request (kFeatureSegmentSample), else the forward's.
  std::vector<runtime::SamplerParams> segmentParams(segments.size(), params);
  if (m_config.segmentSample && c.contains("segments")) {
    for (size_t i = 0; i < segments.size(); ++i) {
      const json& f = c.at("segments")[i];
      if (f.contains("sample")) {
        segmentParams[i] = paramsOf(f.at("sample"));
        ++segmentSamples;
      }
    }
  }
  if (c.contains("decode_ahead")) {
    // As NodeHost: the given token and its successors, each decoded alone and sampled here.
    if (!m_config.decodeAhead) throw Error("forward: unknown field 'decode_ahead'");
    const std::vector<int32_t> decoded = runtime::decodeAheadLocally(
        stage, segments.front().sequence, segments.front().firstPosition, tokens.at(0),
        c.at("decode_ahead").get<int32_t>(), params);
    ++aheadForwards;
    aheadTokens += static_cast<int>(decoded.size());
    return reply(request, {{"op", "forward_result"}, {"tokens", decoded}});
  }
  runtime::StageOutput out;
  stage.forward(batch, out);
  if (stage.spec().hasHead && !c.at("sample").is_null()) {
    // Each segment's logits rows in row order: its last row's token, or every row's.
    const size_t vocab = size_t(m_model.config().nVocab);
    json perSegment = json::array();
    size_t row = 0;
    for (size_t i = 0; i < segments.size(); ++i) {
      const runtime::Segment& s = segments[i];
      json sampled = json::array();
      const int32_t rows = s.logits == runtime::LogitRows::All ? s.count : 1;
      for (int32_t r = 0; r < rows; ++r, ++row) {
        runtime::Sampler sampler(segmentParams[i]);
        sampled.push_back(sampler.sample(std::span(out.logits).subspan(row * vocab, vocab)));
      }
      perSegment.push_back(std::move(sampled));
    }
    if (c.contains("segments")) {
      return reply(request, {{"op", "forward_result"}, {"segment_tokens", perSegment}});
    }
    if (segments.front().logits == runtime::LogitRows::All) {
      return reply(request, {{"op", "forward_result"}, {"tokens", perSegment.front()}});
    }
    return reply(request, {{"op", "forward_result"}, {"token", perSegment.front().front()}});
  }
  const std::vector<float>& values = stage.spec().hasHead ? out.logits : out.hidden;
  std::vector<uint8_t> blob(values.size() * 4);
  if (!blob.empty()) std::memcpy(blob.data(), values.data(), blob.size());
  return reply(request, {{"op", "forward_result"}}, std::move(blob));
}

FakeConnection::FakeConnection(FakeNode& node, std::string address)
    : m_node(node), m_deviceId(node.info().deviceId), m_address(std::move(address)) {}

void FakeConnection::send(const Message& message, std::chrono::milliseconds) {
  if (!isOpen()) throw TransportError(TransportError::Kind::Closed, m_address + ": closed");
  ++m_stats.messagesSent;
  for (Message& r : m_node.handle(message)) m_replies.push_back(std::move(r));
}

Message FakeConnection::receive(std::chrono::milliseconds) {
  if (!isOpen()) {
    throw TransportError(TransportError::Kind::Closed, m_address + ": connection reset by peer");
  }
  if (m_replies.empty()) {
    throw TransportError(TransportError::Kind::Timeout, m_address + ": no reply in time");
  }
  Message m = std::move(m_replies.front());
  m_replies.pop_front();
  ++m_stats.messagesReceived;
  return m;
}

}  // namespace shoal::lan::testing
