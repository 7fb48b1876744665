#include "lan/pool/node_client.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "lan/pool/sha256.h"
#include "lan/pool/snapshot.h"

namespace shoal::lan {
namespace {

// Blobs carry int32/f32 little endian (the wire format); copying host memory is only right on
// little-endian hosts, which is every platform Shoal builds for.
static_assert(std::endian::native == std::endian::little, "blob copies assume little endian");

using Clock = std::chrono::steady_clock;
using nlohmann::json;

template <typename T>
std::vector<uint8_t> toBlob(std::span<const T> values) {
  std::vector<uint8_t> blob(values.size_bytes());
  if (!blob.empty()) std::memcpy(blob.data(), values.data(), blob.size());
  return blob;
}

std::chrono::milliseconds remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

// The model's metadata as a GGUF file without tensors.
std::vector<uint8_t> metadataGguf(const gguf::File& file) {
  gguf::Writer w;
  for (const auto& kv : file.metadata()) w.set(kv.key, kv.value);
  return w.toBytes();
}

std::vector<std::string> namesOf(const Message& reply, const char* key, const std::string& peer) {
  std::vector<std::string> out;
  const auto it = reply.control.find(key);
  if (it == reply.control.end()) return out;
  if (!it->is_array()) throw Error("node " + peer + ": need_weights." + key + " is not an array");
  for (const json& n : *it) {
    if (!n.is_string()) throw Error("node " + peer + ": need_weights." + key + ": non-string name");
    out.push_back(n.get<std::string>());
  }
  return out;
}

std::string opOf(const Message& m) {
  const auto it = m.control.find("op");
  return it != m.control.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

NodeClient::NodeClient(std::shared_ptr<Connection> connection, std::chrono::milliseconds timeout)
    : m_connection(std::move(connection)), m_timeout(timeout) {
  if (!m_connection) throw Error("NodeClient: no connection");
}

NodeClient::~NodeClient() = default;

Message NodeClient::awaitReply(int64_t id, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    Message reply = m_connection->receive(remaining(deadline));
    const auto it = reply.control.find("id");
    if (it == reply.control.end() && opOf(reply) == "error") {
      // A refusal of a message that carries no id (a weights chunk).
      throw Error("node " + peerAddress() + ": " + reply.control.value("message", "error"));
    }
    if (it == reply.control.end() || !it->is_number_integer()) {
      throw Error("node " + peerAddress() + ": reply '" + opOf(reply) + "' without an integer id");
    }
    const int64_t got = it->get<int64_t>();
    if (got < id) {
      if (Clock::now() >= deadline) {
        throw TransportError(
            TransportError::Kind::Timeout,
            "node " + peerAddress() + ": no reply to request " + std::to_string(id));
      }
      continue;  // a late reply to a request that timed out earlier
    }
    if (got != id) {
      throw Error("node " + peerAddress() + ": reply id " + std::to_string(got) + " to request " +
                  std::to_string(id));
    }
    if (opOf(reply) == "error") {
      const auto msg = reply.control.find("message");
      throw Error("node " + peerAddress() + ": " +
                  (msg != reply.control.end() && msg->is_string() ? msg->get<std::string>()
                                                                  : std::string("error")));
    }
    return reply;
  }
}

Message NodeClient::request(Message message, std::chrono::milliseconds timeout) {
  std::lock_guard lock(m_mutex);
  const int64_t id = m_nextId++;
  message.control["id"] = id;
  m_connection->send(message, timeout);
  return awaitReply(id, timeout);
}

NodeInfo NodeClient::info() {
  Message m;
  m.control = {{"op", "node_info"}};
  const Message reply = request(std::move(m), m_timeout);
  NodeInfo info = parseNodeInfo(reply.control);
  if (info.deviceId != peerDeviceId()) {
    // The TLS layer verified the certificate; a node claiming another identity is broken or
    // lying, and its answers cannot be attributed.
    throw Error("node " + peerAddress() + " claims device id " + info.deviceId +
                " but its certificate is " + peerDeviceId());
  }
  return info;
}

double NodeClient::ping() {
  Message m;
  const auto t0 = Clock::now();
  m.control = {{"op", "ping"}, {"t", std::chrono::duration<double>(t0.time_since_epoch()).count()}};
  const Message reply = request(std::move(m), m_timeout);
  if (opOf(reply) != "pong")
    throw Error("node " + peerAddress() + ": ping answered by '" + opOf(reply) + "'");
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double NodeClient::probeBandwidth(size_t bytes) {
  Message m;
  m.control = {{"op", "bandwidth_probe"}};
  m.blob.assign(bytes, 0x5a);
  const auto t0 = Clock::now();
  const Message reply = request(std::move(m), m_timeout);
  if (opOf(reply) != "pong") {
    throw Error("node " + peerAddress() + ": bandwidth_probe answered by '" + opOf(reply) + "'");
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return s > 0 ? static_cast<double>(bytes) / s : 0;
}

LoadStageResult NodeClient::loadStage(const LoadStageRequest& r, const gguf::File& model,
                                      const WeightsProgress& progress,
                                      std::chrono::milliseconds loadTimeout) {
  std::lock_guard lock(m_mutex);
  const StagePlacement& p = r.placement;
  Message m;
  m.control = {
      {"op", "load_stage"},
      {"id", m_nextId++},
      {"stage_id", r.stageId},
      {"model", {{"sha256", r.model.sha256}, {"name", r.model.name}, {"size", r.model.size}}},
      {"device", p.deviceId},
      {"first_layer", p.firstLayer},
      {"last_layer", p.lastLayer},
      {"has_embedding", p.hasEmbedding},
      {"has_head", p.hasHead},
      {"context_length", r.contextLength},
      {"max_sequences", r.maxSequences},
      {"max_batch", r.maxBatch}};
  m.blob = metadataGguf(model);
  m_connection->send(m, m_timeout);
  Message reply = awaitReply(m.control["id"].get<int64_t>(), loadTimeout);

  LoadStageResult result;
  if (opOf(reply) == "need_weights") {
    std::vector<const gguf::TensorInfo*> wanted;
    for (const std::string& name : namesOf(reply, "tensors", peerAddress())) {
      const gguf::TensorInfo* t = model.findTensor(name);
      if (!t) {
        throw Error("node " + peerAddress() + " asks for tensor " + name + ", which " +
                    model.displayName() + " lacks");
      }
      wanted.push_back(t);
    }
    // The embedding matters to a head-only stage only when the output is tied to it.
    const bool hasOutput = model.findTensor("output.weight") != nullptr;
    for (const std::string& name : namesOf(reply, "optional", peerAddress())) {
      if (name == "token_embd.weight" && hasOutput) continue;
      if (const gguf::TensorInfo* t = model.findTensor(name)) wanted.push_back(t);
    }
    uint64_t total = 0;
    for (const gguf::TensorInfo* t : wanted) total += t->nbytes;
    uint64_t sent = 0;
    for (const gguf::TensorInfo* t : wanted) {
      const std::string digest = sha256Hex(std::span<const uint8_t>(t->data, t->nbytes));
      size_t offset = 0;
      do {
        const size_t len = std::min(kWeightChunkBytes, t->nbytes - offset);
        Message chunk;
        chunk.control = {{"op", "weights_chunk"}, {"stage_id", r.stageId},
                         {"tensor", t->name},     {"offset", offset},
                         {"total", t->nbytes},    {"type", static_cast<uint32_t>(t->type)},
                         {"dims", t->dims}};
        if (offset + len == t->nbytes) chunk.control["sha256"] = digest;
        chunk.blob.assign(t->data + offset, t->data + offset + len);
        m_connection->send(chunk, m_timeout);
        offset += len;
        sent += len;
        if (progress) progress(sent, total);
      } while (offset < t->nbytes);
    }
    Message done;
    const int64_t doneId = m_nextId++;
    done.control = {{"op", "weights_done"}, {"id", doneId}, {"stage_id", r.stageId}};
    m_connection->send(done, m_timeout);
    result.streamedBytes = sent;
    reply = awaitReply(doneId, loadTimeout);
  }
  if (opOf(reply) != "stage_ready") {
    throw Error("node " + peerAddress() + ": load_stage " + r.stageId + " answered by '" +
                opOf(reply) + "'");
  }
  result.loadMs = reply.control.value("load_ms", 0.0);
  result.source = reply.control.value("source", std::string());
  return result;
}

ForwardReply NodeClient::forward(const ForwardRequest& r) {
  Message m;
  m.control = {{"op", "forward"},        {"stage_id", r.stageId},
               {"sequence", r.sequence}, {"first_position", r.firstPosition},
               {"count", r.count},       {"sample", nullptr}};
  if (r.sample) {
    m.control["sample"] = {{"temperature", r.sample->temperature},
                           {"top_p", r.sample->topP},
                           {"top_k", r.sample->topK},
                           {"min_p", r.sample->minP},
                           {"seed", r.sample->seed}};
  }
  m.blob = r.tokens.empty() ? toBlob(r.hidden) : toBlob(r.tokens);
  const Message reply = request(std::move(m), m_timeout);
  if (opOf(reply) != "forward_result") {
    throw Error("node " + peerAddress() + ": forward answered by '" + opOf(reply) + "'");
  }
  ForwardReply out;
  if (const auto t = reply.control.find("token"); t != reply.control.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 0) {
      throw Error("node " + peerAddress() + ": forward_result token is not an id: " + t->dump());
    }
    out.token = static_cast<int32_t>(t->get<int64_t>());
    return out;
  }
  if (reply.blob.size() % sizeof(float) != 0) {
    throw Error("node " + peerAddress() + ": forward_result blob of " +
                std::to_string(reply.blob.size()) + " bytes is not whole f32 values");
  }
  out.values.resize(reply.blob.size() / sizeof(float));
  if (!out.values.empty()) std::memcpy(out.values.data(), reply.blob.data(), reply.blob.size());
  return out;
}

void NodeClient::truncate(const std::string& stageId, int32_t sequence, int32_t fromPosition) {
  Message m;
  m.control = {{"op", "truncate"},
               {"stage_id", stageId},
               {"sequence", sequence},
               {"from_position", fromPosition}};
  request(std::move(m), m_timeout);
}

void NodeClient::unloadStage(const std::string& stageId) {
  Message m;
  m.control = {{"op", "unload_stage"}, {"stage_id", stageId}};
  request(std::move(m), m_timeout);
}

void NodeClient::unloadStageNoWait(const std::string& stageId) {
  std::lock_guard lock(m_mutex);
  Message m;
  m.control = {{"op", "unload_stage"}, {"id", m_nextId++}, {"stage_id", stageId}};
  m_connection->send(m, std::chrono::milliseconds(1000));
}

std::vector<DeviceTelemetry> NodeClient::telemetry() {
  Message m;
  m.control = {{"op", "telemetry"}};
  return parseTelemetryReply(request(std::move(m), m_timeout).control);
}

}  // namespace shoal::lan
