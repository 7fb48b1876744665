#include "lan/pool/remote_stage.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"

namespace shoal::lan {

RemoteStage::RemoteStage(std::shared_ptr<NodeClient> client, const LoadStageRequest& request,
                         int32_t nEmbd, int32_t nVocab)
    : m_client(std::move(client)),
      m_stageId(request.stageId),
      m_placement(request.placement),
      m_nEmbd(nEmbd),
      m_nVocab(nVocab),
      m_cached(static_cast<size_t>(std::max(1, request.maxSequences)), 0) {
  m_spec.firstLayer = m_placement.firstLayer;
  m_spec.lastLayer = m_placement.lastLayer;
  m_spec.hasEmbedding = m_placement.hasEmbedding;
  m_spec.hasHead = m_placement.hasHead;
  m_spec.contextLength = request.contextLength;
  m_spec.maxSequences = std::max(1, request.maxSequences);
  m_spec.maxBatch = request.maxBatch;
}

RemoteStage::~RemoteStage() {
  if (!m_isLoaded || !m_client->isOpen()) return;
  try {
    m_client->unloadStageNoWait(m_stageId);
  } catch (...) {
    // Best effort: the node drops the stage with the connection anyway.
  }
}

std::unique_ptr<RemoteStage> RemoteStage::deploy(std::shared_ptr<NodeClient> client,
                                                 const gguf::File& model,
                                                 const LoadStageRequest& request,
                                                 const WeightsProgress& progress,
                                                 std::chrono::milliseconds loadTimeout) {
  if (!client) throw Error("RemoteStage::deploy " + request.stageId + ": no node client");
  const model::ModelConfig config = model::ModelConfig::fromGguf(model);
  std::unique_ptr<RemoteStage> stage(
      new RemoteStage(std::move(client), request, config.nEmbd, config.nVocab));
  stage->m_loaded = stage->m_client->loadStage(request, model, progress, loadTimeout);
  stage->m_isLoaded = true;
  return stage;
}

ForwardReply RemoteStage::send(const runtime::StageInput& input, const RemoteSampling* sampling) {
  if (input.sequence < 0 || input.sequence >= m_spec.maxSequences) {
    throw Error("remote stage " + m_stageId + ": sequence " + std::to_string(input.sequence) +
                " outside [0, " + std::to_string(m_spec.maxSequences) + ")");
  }
  if (input.allLogits) {
    throw Error("remote stage " + m_stageId + ": allLogits is not supported over the network");
  }
  const size_t count = static_cast<size_t>(std::max(0, input.count));
  if (m_spec.hasEmbedding && input.tokens.size() != count) {
    throw Error("remote stage " + m_stageId + ": " + std::to_string(input.tokens.size()) +
                " token ids for count " + std::to_string(input.count));
  }
  if (!m_spec.hasEmbedding && input.hidden.size() != count * size_t(m_nEmbd)) {
    throw Error("remote stage " + m_stageId + ": " + std::to_string(input.hidden.size()) +
                " hidden values for count " + std::to_string(input.count) + " x n_embd " +
                std::to_string(m_nEmbd));
  }
  ForwardRequest r;
  r.stageId = m_stageId;
  r.sequence = input.sequence;
  r.firstPosition = input.firstPosition;
  r.count = input.count;
  if (m_spec.hasEmbedding) {
    r.tokens = input.tokens;
  } else {
    r.hidden = input.hidden;
  }
  r.sample = sampling;
  ForwardReply reply = m_client->forward(r);
  m_cached[static_cast<size_t>(input.sequence)] = input.firstPosition + input.count;
  return reply;
}

void RemoteStage::forward(const runtime::StageInput& input, runtime::StageOutput& output) {
  ForwardReply r = send(input, nullptr);
  const size_t expected = m_spec.hasHead ? size_t(m_nVocab) : size_t(input.count) * size_t(m_nEmbd);
  if (r.values.size() != expected) {
    throw Error("node " + m_client->peerAddress() + ": stage " + m_stageId + " returned " +
                std::to_string(r.values.size()) + " floats, expected " + std::to_string(expected));
  }
  (m_spec.hasHead ? output.logits : output.hidden) = std::move(r.values);
}

int32_t RemoteStage::forwardSample(const runtime::StageInput& input,
                                   const RemoteSampling& sampling) {
  if (!m_spec.hasHead) {
    throw Error("remote stage " + m_stageId + ": forwardSample on a stage without the head");
  }
  const ForwardReply r = send(input, &sampling);
  if (r.token < 0 || r.token >= m_nVocab) {
    throw Error("node " + m_client->peerAddress() + ": stage " + m_stageId +
                " returned no valid token (got " + std::to_string(r.token) + ", vocabulary " +
                std::to_string(m_nVocab) + ")");
  }
  return r.token;
}

void RemoteStage::truncate(int32_t sequence, int32_t fromPosition) {
  m_client->truncate(m_stageId, sequence, fromPosition);
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
  if (!m_isLoaded || !m_client->isOpen()) return;
  m_isLoaded = false;
  m_client->unloadStage(m_stageId);
}

}  // namespace shoal::lan
