#pragma once
// A stage whose layers run on another node of the pool: the coordinator's proxy for a stage
// hosted by lan/node's NodeHost. It has the runtime::Stage interface, so it stands wherever a
// local stage does (a Chain, the Coordinator's pipeline); forward() sends the batch through the
// node's NodeClient and waits for the result. The protocol itself lives in NodeClient only.
//
// Threading: like every Stage, one thread drives it. Several RemoteStages may share one
// NodeClient (two stages on one node); NodeClient serializes their requests with the telemetry
// poller's.
//
// Errors: a refusal reported by the node throws shoal::Error ("node <addr>: <message>"); network
// failures (timeout, closed) throw TransportError (lan/transport/connection.h).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/stage.h"
#include "lan/pool/node_client.h"
#include "lan/pool/pool_builder.h"

namespace shoal::gguf {
class File;
}

namespace shoal::lan {

class RemoteStage final : public runtime::Stage {
 public:
  // Asks the node behind `client` to load the stage (NodeClient::loadStage: weights streamed
  // from `model` when the node lacks them, progress reported) and returns once it is ready.
  // The client's connection must stay open while the stage is used.
  static std::unique_ptr<RemoteStage> deploy(
      std::shared_ptr<NodeClient> client, const gguf::File& model, const LoadStageRequest& request,
      const WeightsProgress& progress = {},
      std::chrono::milliseconds loadTimeout = std::chrono::minutes(10));

  // Sends unload_stage without waiting for the answer: a destructor must not block on a node
  // that may be gone (the node also unloads a closed connection's stages). The late "ok" is
  // skipped by NodeClient as every reply to an older request is.
  ~RemoteStage() override;

  const runtime::StageSpec& spec() const override { return m_spec; }
  // Token ids (embedding stage) or hidden states to the node; hidden states, or the logits of
  // the last token on the head, back. allLogits is not supported remotely (shoal::Error).
  void forward(const runtime::StageInput& input, runtime::StageOutput& output) override;
  void truncate(int32_t sequence, int32_t fromPosition) override;
  // Mirrored from the requests this proxy sent (the node is not asked).
  int32_t cachedPositions(int32_t sequence) const override;

  // Head stage only: run the batch and let the node sample the next token, so logits never
  // cross the network. Checks the token is in the vocabulary.
  int32_t forwardSample(const runtime::StageInput& input, const RemoteSampling& sampling);

  // Drops the stage on the node and waits for its answer (the destructor then sends nothing).
  void unload();

  const std::string& stageId() const { return m_stageId; }
  const StagePlacement& placement() const { return m_placement; }
  const LoadStageResult& loaded() const { return m_loaded; }  // source, load ms, bytes streamed
  const std::shared_ptr<NodeClient>& client() const { return m_client; }

 private:
  RemoteStage(std::shared_ptr<NodeClient> client, const LoadStageRequest& request, int32_t nEmbd,
              int32_t nVocab);
  ForwardReply send(const runtime::StageInput& input, const RemoteSampling* sampling);

  std::shared_ptr<NodeClient> m_client;
  std::string m_stageId;
  StagePlacement m_placement;
  runtime::StageSpec m_spec;
  int32_t m_nEmbd;
  int32_t m_nVocab;
  std::vector<int32_t> m_cached;  // positions cached per sequence
  LoadStageResult m_loaded;
  bool m_isLoaded = false;
};

}  // namespace shoal::lan
