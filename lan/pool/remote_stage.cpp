#include "lan/pool/remote_stage.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/model_config.h"
#include "lan/node/sha256.h"

namespace shoal::lan {

namespace {

using nlohmann::json;

// Request ids are unique in the process, so a late reply to a timed-out request can never be
// taken for the reply to a newer one.
std::atomic<int64_t> g_nextId{1};

// The model's metadata as a GGUF file without tensors: what a node writes into a streamed shard.
std::vector<uint8_t> metadataGguf(const gguf::File& file) {
  gguf::Writer w;
  for (const auto& kv : file.metadata()) w.set(kv.key, kv.value);
  return w.toBytes();
}

}  // namespace

RemoteStage::RemoteStage(std::shared_ptr<Connection> connection, RemoteStageOptions options,
                         int32_t nEmbd, int32_t nVocab)
    : m_connection(std::move(connection)),
      m_options(std::move(options)),
      m_nEmbd(nEmbd),
      m_nVocab(nVocab),
      m_cached(static_cast<size_t>(std::max(1, m_options.spec.maxSequences)), 0) {}

RemoteStage::~RemoteStage() {
  // Fire and forget: a destructor must not wait on a node that may be gone (the node also
  // unloads a closed connection's stages). A late "ok" is skipped by the next call() on a shared
  // connection, as every reply with a foreign id is.
  if (!m_loaded || !m_connection->isOpen()) return;
  try {
    Message m;
    m.control = {{"op", "unload_stage"}, {"id", g_nextId++}, {"stage_id", m_options.stageId}};
    m_connection->send(m, std::chrono::milliseconds(1000));
  } catch (...) {
  }
}

Message RemoteStage::call(Message request, std::chrono::milliseconds timeout) {
  const int64_t id = g_nextId++;
  request.control["id"] = id;
  const std::string op = request.control.value("op", "");
  m_connection->send(request, timeout);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw TransportError(TransportError::Kind::Timeout,
                           m_connection->peerAddress() + ": no reply to " + op + " in " +
                               std::to_string(timeout.count()) + " ms");
    }
    Message reply = m_connection->receive(left);
    // Replies to requests that timed out earlier are stale: skip them.
    if (reply.control.value("id", json()) != json(id)) {
      if (reply.control.value("op", "") == "error" && !reply.control.contains("id")) {
        throw Error("node " + m_connection->peerAddress() + ": " +
                    reply.control.value("message", "error"));
      }
      continue;
    }
    if (reply.control.value("op", "") == "error") {
      throw Error("node " + m_connection->peerAddress() + ": " + op + ": " +
                  reply.control.value("message", "error"));
    }
    return reply;
  }
}

std::unique_ptr<RemoteStage> RemoteStage::deploy(std::shared_ptr<Connection> connection,
                                                 const RemoteModel& model,
                                                 const RemoteStageOptions& options,
                                                 const DeployProgressFn& progress) {
  if (!model.file) throw Error("RemoteStage::deploy: no model file given");
  const model::ModelConfig config = model::ModelConfig::fromGguf(*model.file);
  std::unique_ptr<RemoteStage> stage(
      new RemoteStage(std::move(connection), options, config.nEmbd, config.nVocab));
  const runtime::StageSpec& s = options.spec;
  Message load;
  load.control = {
      {"op", "load_stage"},
      {"stage_id", options.stageId},
      {"model", {{"sha256", model.sha256}, {"name", model.name}, {"size", model.file->fileSize()}}},
      {"device", options.device},
      {"first_layer", s.firstLayer},
      {"last_layer", s.lastLayer},
      {"has_embedding", s.hasEmbedding},
      {"has_head", s.hasHead},
      {"context_length", s.contextLength},
      {"max_sequences", s.maxSequences},
      {"max_batch", s.maxBatch}};
  load.blob = metadataGguf(*model.file);
  Message answer = stage->call(std::move(load), options.loadTimeout);
  const std::string op = answer.control.value("op", "");
  if (op == "need_weights") {
    stage->streamWeights(model, answer, progress);
    Message done;
    done.control = {{"op", "weights_done"}, {"stage_id", options.stageId}};
    answer = stage->call(std::move(done), options.loadTimeout);
  }
  if (answer.control.value("op", "") != "stage_ready") {
    throw Error("node " + stage->m_connection->peerAddress() + ": load_stage answered '" +
                answer.control.value("op", "") + "', expected stage_ready");
  }
  stage->m_loaded = true;
  stage->m_loadSource = answer.control.value("source", "");
  stage->m_loadMs = answer.control.value("load_ms", 0.0);
  return stage;
}

void RemoteStage::streamWeights(const RemoteModel& model, const Message& needWeights,
                                const DeployProgressFn& progress) {
  const gguf::File& file = *model.file;
  std::vector<const gguf::TensorInfo*> send;
  const auto names = [&](const char* key) {
    std::vector<std::string> v;
    const json& a = needWeights.control.value(key, json::array());
    if (!a.is_array()) throw Error("need_weights: '" + std::string(key) + "' is not an array");
    for (const auto& n : a) {
      if (!n.is_string()) throw Error("need_weights: a tensor name is not a string");
      v.push_back(n.get<std::string>());
    }
    return v;
  };
  for (const auto& n : names("tensors")) {
    const gguf::TensorInfo* t = file.findTensor(n);
    if (!t)
      throw Error(file.displayName() + ": the node asks for tensor " + n + ", not in the file");
    send.push_back(t);
  }
  const bool hasOutput = file.findTensor("output.weight") != nullptr;
  for (const auto& n : names("optional")) {
    // The embedding matters to a head-only stage only when the output is tied to it.
    if (n == "token_embd.weight" && hasOutput) continue;
    if (const gguf::TensorInfo* t = file.findTensor(n)) send.push_back(t);
  }
  DeployProgress p;
  for (const auto* t : send) p.bytesTotal += t->nbytes;
  for (const auto* t : send) {
    p.tensor = t->name;
    Sha256 hash;
    size_t offset = 0;
    do {
      const size_t n = std::min(kChunkBytes, t->nbytes - offset);
      Message chunk;
      chunk.control = {{"op", "weights_chunk"}, {"stage_id", m_options.stageId},
                       {"tensor", t->name},     {"offset", offset},
                       {"total", t->nbytes},    {"type", static_cast<uint32_t>(t->type)},
                       {"dims", t->dims}};
      chunk.blob.assign(t->data + offset, t->data + offset + n);
      hash.update(chunk.blob);
      offset += n;
      if (offset == t->nbytes) chunk.control["sha256"] = hash.hexDigest();
      m_connection->send(chunk, m_options.loadTimeout);
      m_weightBytesSent += n;
      p.bytesSent += n;
      if (progress) progress(p);
    } while (offset < t->nbytes);
  }
}

Message RemoteStage::sendForward(const runtime::StageInput& input, const json& sample) {
  const runtime::StageSpec& s = m_options.spec;
  if (input.sequence < 0 || input.sequence >= s.maxSequences) {
    throw Error("remote stage " + m_options.stageId + ": sequence " +
                std::to_string(input.sequence) + " outside [0, " + std::to_string(s.maxSequences) +
                ")");
  }
  if (input.allLogits) throw Error("remote stage: allLogits is not supported over the network");
  Message m;
  m.control = {{"op", "forward"},
               {"stage_id", m_options.stageId},
               {"sequence", input.sequence},
               {"first_position", input.firstPosition},
               {"count", input.count},
               {"sample", sample}};
  if (s.hasEmbedding) {
    if (input.tokens.size() != static_cast<size_t>(input.count)) {
      throw Error("remote stage: " + std::to_string(input.tokens.size()) + " token ids for count " +
                  std::to_string(input.count));
    }
    m.blob.resize(input.tokens.size() * sizeof(int32_t));
    std::memcpy(m.blob.data(), input.tokens.data(), m.blob.size());
  } else {
    if (input.hidden.size() != static_cast<size_t>(input.count) * static_cast<size_t>(m_nEmbd)) {
      throw Error("remote stage: " + std::to_string(input.hidden.size()) +
                  " hidden values for count " + std::to_string(input.count) + " x n_embd " +
                  std::to_string(m_nEmbd));
    }
    m.blob.resize(input.hidden.size() * sizeof(float));
    std::memcpy(m.blob.data(), input.hidden.data(), m.blob.size());
  }
  Message r = call(std::move(m), m_options.timeout);
  m_cached[static_cast<size_t>(input.sequence)] = input.firstPosition + input.count;
  return r;
}

void RemoteStage::forward(const runtime::StageInput& input, runtime::StageOutput& output) {
  const Message r = sendForward(input, json());
  const size_t expected =
      m_options.spec.hasHead ? size_t(m_nVocab) : size_t(input.count) * size_t(m_nEmbd);
  if (r.blob.size() != expected * sizeof(float)) {
    throw Error("node " + m_connection->peerAddress() + ": forward_result of " +
                std::to_string(r.blob.size()) + " bytes, expected " +
                std::to_string(expected * sizeof(float)));
  }
  std::vector<float>& dst = m_options.spec.hasHead ? output.logits : output.hidden;
  dst.resize(expected);
  std::memcpy(dst.data(), r.blob.data(), r.blob.size());
}

int32_t RemoteStage::forwardSample(const runtime::StageInput& input,
                                   const RemoteSampleParams& sampling) {
  if (!m_options.spec.hasHead) throw Error("remote stage: forwardSample on a stage without head");
  const json sample = {{"temperature", sampling.temperature},
                       {"top_p", sampling.topP},
                       {"top_k", sampling.topK},
                       {"min_p", sampling.minP},
                       {"seed", sampling.seed}};
  const Message r = sendForward(input, sample);
  const json& token = r.control.value("token", json());
  if (!token.is_number_integer() || token.get<int64_t>() < 0 || token.get<int64_t>() >= m_nVocab) {
    throw Error("node " + m_connection->peerAddress() + ": forward_result without a valid token");
  }
  return token.get<int32_t>();
}

void RemoteStage::truncate(int32_t sequence, int32_t fromPosition) {
  Message m;
  m.control = {{"op", "truncate"},
               {"stage_id", m_options.stageId},
               {"sequence", sequence},
               {"from_position", fromPosition}};
  call(std::move(m), m_options.timeout);
  if (sequence >= 0 && static_cast<size_t>(sequence) < m_cached.size()) {
    int32_t& c = m_cached[static_cast<size_t>(sequence)];
    c = std::min(c, fromPosition);
  }
}

int32_t RemoteStage::cachedPositions(int32_t sequence) const {
  if (sequence < 0 || static_cast<size_t>(sequence) >= m_cached.size()) return 0;
  return m_cached[static_cast<size_t>(sequence)];
}

void RemoteStage::unload() {
  if (!m_loaded || !m_connection->isOpen()) return;
  m_loaded = false;
  Message m;
  m.control = {{"op", "unload_stage"}, {"stage_id", m_options.stageId}};
  call(std::move(m), m_options.timeout);
}

}  // namespace shoal::lan
