#include "lan/pool/node_client.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "lan/pool/forward_fields.h"
#include "lan/pool/sha256.h"
#include "lan/pool/snapshot.h"

namespace shoal::lan {
namespace {

// Blobs carry int32/f32 little endian (the wire format); copying host memory is only right on
// little-endian hosts, which is every platform Shoal builds for.
static_assert(std::endian::native == std::endian::little, "blob copies assume little endian");

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// A reply's flag: true only when present and the boolean true (a node's reply of another type
// is not a flag; json::value would throw its own type_error).
bool isTrue(const json& control, const char* field) {
  const auto it = control.find(field);
  return it != control.end() && it->is_boolean() && it->get<bool>();
}

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

NodeClient::RequestId NodeClient::send(Message message, std::chrono::milliseconds timeout,
                                       bool withId, bool awaitReply) {
  std::lock_guard sending(m_sendMutex);
  RequestId id = 0;
  if (withId) {
    std::lock_guard lock(m_mutex);
    id = ++m_lastId;
    // Registered before it is sent: another thread may read the reply first.
    if (awaitReply) m_awaited.emplace(id, Awaited{});
    message.control["id"] = id;
  }
  try {
    m_connection->send(message, timeout);
  } catch (...) {
    if (awaitReply) abandon(id);
    throw;
  }
  return id;
}

void NodeClient::abandon(RequestId id) {
  std::lock_guard lock(m_mutex);
  m_awaited.erase(id);
}

void NodeClient::dispatch(Message message) {
  // Replies come in request order, so a malformed one stands where the oldest awaited
  // request's reply would: that request fails with the reason.
  const auto failOldest = [&](const std::string& why) {
    for (auto& [id, awaited] : m_awaited) {
      if (awaited.reply || awaited.error) continue;
      awaited.error = std::make_exception_ptr(Error(
          "node " + peerAddress() + ": " + why + " (awaiting request " + std::to_string(id) + ")"));
      return;
    }
  };
  const auto it = message.control.find("id");
  if (it == message.control.end() && opOf(message) == "error") {
    // A refused weights chunk (chunks carry no id): the stream's weights_done is answered
    // with the reason too, which is where the loading thread sees it.
    return;
  }
  if (it == message.control.end() || !it->is_number_integer()) {
    failOldest("reply '" + opOf(message) + "' without an integer id");
    return;
  }
  const RequestId got = it->get<int64_t>();
  if (got > m_lastId) {
    failOldest("reply id " + std::to_string(got) + " to a request never sent");
    return;
  }
  const auto awaited = m_awaited.find(got);
  // Nobody waits for it: a request that timed out or was abandoned, unloadStageNoWait.
  if (awaited == m_awaited.end() || awaited->second.reply || awaited->second.error) return;
  awaited->second.reply = std::move(message);
}

Message NodeClient::awaitReply(RequestId id, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const auto timedOut = [&] {
    return TransportError(TransportError::Kind::Timeout,
                          "node " + peerAddress() + ": no reply to request " + std::to_string(id));
  };
  std::unique_lock lock(m_mutex);
  for (;;) {
    const auto it = m_awaited.find(id);
    if (it == m_awaited.end()) {
      throw Error("node " + peerAddress() + ": request " + std::to_string(id) + " is not awaited");
    }
    if (it->second.reply || it->second.error) {
      Awaited done = std::move(it->second);
      m_awaited.erase(it);
      lock.unlock();
      if (done.error) std::rethrow_exception(done.error);
      const Message& reply = *done.reply;
      if (opOf(reply) == "error") {
        const auto msg = reply.control.find("message");
        const std::string text =
            "node " + peerAddress() + ": " +
            (msg != reply.control.end() && msg->is_string() ? msg->get<std::string>()
                                                            : std::string("error"));
        // A failure of direct forwarding's link, not of the request itself.
        if (isTrue(reply.control, "link_failed")) throw LinkFailure(text);
        throw Error(text);
      }
      return std::move(*done.reply);
    }
    if (Clock::now() >= deadline) {
      m_awaited.erase(it);
      throw timedOut();
    }
    if (m_reading) {  // another waiter reads; it files our reply when it comes
      m_arrived.wait_until(lock, deadline);
      continue;
    }
    m_reading = true;
    lock.unlock();
    std::optional<Message> got;
    std::exception_ptr failure;
    bool nothingInTime = false;
    try {
      got = m_connection->receive(remaining(deadline));
    } catch (const TransportError& e) {
      if (e.kind() == TransportError::Kind::Timeout) {
        nothingInTime = true;
      } else {
        failure = std::current_exception();
      }
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    m_reading = false;
    if (got) dispatch(std::move(*got));
    if (failure) {
      // The connection is gone: every request in flight on it fails the same way.
      for (auto& [other, awaited] : m_awaited) {
        if (!awaited.reply && !awaited.error) awaited.error = failure;
      }
    }
    m_arrived.notify_all();
    if (nothingInTime) {
      const auto mine = m_awaited.find(id);
      if (mine != m_awaited.end() && !mine->second.reply && !mine->second.error) {
        m_awaited.erase(mine);
        throw timedOut();
      }
    }
  }
}

Message NodeClient::request(Message message, std::chrono::milliseconds timeout) {
  return awaitReply(send(std::move(message), timeout, true, true), timeout);
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
  std::lock_guard loading(m_loadMutex);
  const StagePlacement& p = r.placement;
  Message m;
  m.control = {
      {"op", "load_stage"},
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
  Message reply = awaitReply(send(std::move(m), m_timeout, true, true), loadTimeout);

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
        send(std::move(chunk), m_timeout, false, false);
        offset += len;
        sent += len;
        if (progress) progress(sent, total);
      } while (offset < t->nbytes);
    }
    Message done;
    done.control = {{"op", "weights_done"}, {"stage_id", r.stageId}};
    result.streamedBytes = sent;
    reply = awaitReply(send(std::move(done), m_timeout, true, true), loadTimeout);
  }
  if (opOf(reply) != "stage_ready") {
    throw Error("node " + peerAddress() + ": load_stage " + r.stageId + " answered by '" +
                opOf(reply) + "'");
  }
  // Reported figures only: a field of another type reads as absent (json::value would throw).
  if (const auto ms = reply.control.find("load_ms"); ms != reply.control.end() && ms->is_number()) {
    result.loadMs = ms->get<double>();
  }
  if (const auto src = reply.control.find("source");
      src != reply.control.end() && src->is_string()) {
    result.source = src->get<std::string>();
  }
  return result;
}

std::string NodeClient::linkAccept(const std::string& stageId, const std::string& fromDevice) {
  Message m;
  m.control = {{"op", "link_accept"}, {"stage_id", stageId}, {"from_device", fromDevice}};
  const Message reply = request(std::move(m), m_timeout);
  const auto route = reply.control.find("route");
  if (opOf(reply) != "link_accepted" || route == reply.control.end() || !route->is_string() ||
      route->get<std::string>().empty() || route->get<std::string>().size() > 64) {
    throw Error("node " + peerAddress() + ": link_accept answered by '" + opOf(reply) + "'");
  }
  return route->get<std::string>();
}

double NodeClient::linkConnect(const std::string& stageId, const std::string& address,
                               const std::string& deviceId, const std::string& route) {
  Message m;
  m.control = {{"op", "link_connect"},
               {"stage_id", stageId},
               {"address", address},
               {"device_id", deviceId},
               {"route", route}};
  const Message reply = request(std::move(m), m_timeout);
  // A figure from the network: only a plausible round trip counts.
  const auto rtt = reply.control.find("rtt_ms");
  if (rtt == reply.control.end() || !rtt->is_number()) return 0;
  const double ms = rtt->get<double>();
  return ms > 0 && ms < 60000 ? ms / 1e3 : 0;
}

namespace {

json sampleJson(const runtime::SampleRequest& s) {
  return {{"temperature", s.temperature},
          {"top_p", s.topP},
          {"top_k", s.topK},
          {"min_p", s.minP},
          {"seed", s.seed}};
}

}  // namespace

NodeClient::RequestId NodeClient::sendForward(const ForwardRequest& r) {
  Message m;
  if (r.segments.empty()) {
    m.control = {{"op", "forward"},        {"stage_id", r.stageId},
                 {"sequence", r.sequence}, {"first_position", r.firstPosition},
                 {"count", r.count},       {"logits", logitRowsName(r.logits)},
                 {"sample", nullptr}};
    if (r.decodeOrder) m.control["decode_order"] = true;
  } else {
    json segments = json::array();
    for (size_t i = 0; i < r.segments.size(); ++i) {
      const runtime::Segment& s = r.segments[i];
      json one = {{"sequence", s.sequence},
                  {"first_position", s.firstPosition},
                  {"count", s.count},
                  {"logits", logitRowsName(s.logits)}};
      if (s.decodeOrder) one["decode_order"] = true;
      if (i < r.segmentSamples.size()) one["sample"] = sampleJson(r.segmentSamples[i]);
      segments.push_back(std::move(one));
    }
    m.control = {{"op", "forward"},
                 {"stage_id", r.stageId},
                 {"segments", std::move(segments)},
                 {"sample", nullptr}};
  }
  if (r.fromLink) {
    m.control["from_link"] = true;
    m.control["link_wait_ms"] = static_cast<int64_t>(m_timeout.count());
  }
  if (r.toLink) m.control["to_link"] = true;
  if (r.decodeAhead > 0) m.control["decode_ahead"] = r.decodeAhead;
  if (r.sample) {
    m.control["sample"] = sampleJson(*r.sample);
  } else if (!r.segmentSamples.empty()) {
    m.control["sample"] = sampleJson(r.segmentSamples.front());  // each segment's own overrides
  }
  m.blob = r.tokens.empty() ? toBlob(r.hidden) : toBlob(r.tokens);
  return send(std::move(m), m_timeout, true, true);
}

ForwardReply NodeClient::receiveForward(RequestId id) {
  const Message reply = awaitReply(id, m_timeout);
  if (opOf(reply) != "forward_result") {
    throw Error("node " + peerAddress() + ": forward answered by '" + opOf(reply) + "'");
  }
  ForwardReply out;
  if (isTrue(reply.control, "forwarded")) {
    out.forwarded = true;
    return out;
  }
  if (const auto t = reply.control.find("token"); t != reply.control.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 0) {
      throw Error("node " + peerAddress() + ": forward_result token is not an id: " + t->dump());
    }
    out.token = static_cast<int32_t>(t->get<int64_t>());
    return out;
  }
  // An array of token ids (checked: they come from the network).
  auto idsOf = [this](const json& list, const char* field) {
    if (!list.is_array()) {
      throw Error("node " + peerAddress() + ": forward_result " + field + " is not an array");
    }
    std::vector<int32_t> ids;
    for (const json& value : list) {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
          value.get<int64_t>() > INT32_MAX) {
        throw Error("node " + peerAddress() + ": forward_result " + field +
                    " hold a non-id: " + value.dump());
      }
      ids.push_back(static_cast<int32_t>(value.get<int64_t>()));
    }
    return ids;
  };
  if (const auto t = reply.control.find("tokens"); t != reply.control.end()) {
    out.tokens = idsOf(*t, "tokens");
    return out;
  }
  if (const auto t = reply.control.find("segment_tokens"); t != reply.control.end()) {
    if (!t->is_array()) {
      throw Error("node " + peerAddress() + ": forward_result segment_tokens is not an array");
    }
    for (const json& one : *t) out.segmentTokens.push_back(idsOf(one, "segment_tokens"));
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

int32_t NodeClient::truncate(const std::string& stageId, int32_t sequence, int32_t fromPosition) {
  Message m;
  m.control = {{"op", "truncate"},
               {"stage_id", stageId},
               {"sequence", sequence},
               {"from_position", fromPosition}};
  const Message r = request(std::move(m), m_timeout);
  const json kept = r.control.value("kept", json(fromPosition));
  if (!kept.is_number_integer() || kept.get<int64_t>() < 0 || kept.get<int64_t>() > fromPosition) {
    throw Error("node " + peerAddress() + ": truncate answered kept positions outside [0, " +
                std::to_string(fromPosition) + "]");
  }
  return kept.get<int32_t>();
}

void NodeClient::unloadStage(const std::string& stageId) {
  Message m;
  m.control = {{"op", "unload_stage"}, {"stage_id", stageId}};
  request(std::move(m), m_timeout);
}

void NodeClient::unloadStageNoWait(const std::string& stageId) {
  Message m;
  m.control = {{"op", "unload_stage"}, {"stage_id", stageId}};
  send(std::move(m), std::chrono::milliseconds(1000), true, false);
}

std::vector<DeviceTelemetry> NodeClient::telemetry() {
  Message m;
  m.control = {{"op", "telemetry"}};
  return parseTelemetryReply(request(std::move(m), m_timeout).control);
}

}  // namespace shoal::lan
