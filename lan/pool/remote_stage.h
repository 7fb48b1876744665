#pragma once
// A stage whose layers run on another node of the pool: the coordinator's proxy for a stage
// hosted by lan/node's NodeHost (protocol in lan/node/node_host.h). It has the Stage interface,
// so a Chain mixes it with local stages; forward() sends the batch over the connection and waits
// for the result.
//
// Threading: like every Stage, one thread at a time. Several RemoteStages may share one
// Connection (two stages on one node) as long as one thread drives them all (a Chain does):
// each call sends one request and reads until its reply.
//
// Errors: a refusal reported by the node throws shoal::Error ("node <addr>: <message>"); network
// failures (timeout, closed) throw TransportError (lan/transport/connection.h).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/stage.h"
#include "lan/transport/connection.h"

namespace shoal::gguf {
class File;
}

namespace shoal::lan {

// The model a stage is cut from, as the coordinator has it.
struct RemoteModel {
  const gguf::File* file = nullptr;  // needed for the metadata and for streaming weights
  std::string sha256;                // of the whole file: how nodes recognise it
  std::string name;                  // display name
};

struct RemoteStageOptions {
  std::string stageId;          // unique per node and pool, e.g. "stage-1"
  std::string device = "cpu0";  // the node's device id (node_info)
  runtime::StageSpec spec;
  std::chrono::milliseconds timeout{30000};       // per forward/truncate reply
  std::chrono::milliseconds loadTimeout{600000};  // for stage_ready (disk, upload, streamed)
};

struct DeployProgress {
  uint64_t bytesSent = 0;   // weight bytes streamed so far
  uint64_t bytesTotal = 0;  // weight bytes the node asked for (0 when none)
  std::string tensor;       // the tensor being sent
};
using DeployProgressFn = std::function<void(const DeployProgress&)>;

// Sampling on the node that holds the head, so logits never cross the network.
struct RemoteSampleParams {
  float temperature = 0;  // <= 0: greedy
  float topP = 1;
  int32_t topK = 0;
  float minP = 0;
  uint64_t seed = 0;
};

class RemoteStage final : public runtime::Stage {
 public:
  // Ask the node to load the stage (load_stage); when it lacks the model and a cached shard,
  // stream the tensors it lists from model.file in chunks of kChunkBytes, reporting progress.
  // Returns once the node replies stage_ready. The connection must stay open while the stage
  // is used.
  static std::unique_ptr<RemoteStage> deploy(std::shared_ptr<Connection> connection,
                                             const RemoteModel& model,
                                             const RemoteStageOptions& options,
                                             const DeployProgressFn& progress = {});

  static constexpr size_t kChunkBytes = size_t{8} << 20;  // the protocol's chunk limit

  ~RemoteStage() override;

  const runtime::StageSpec& spec() const override { return m_options.spec; }
  // Hidden states (or token ids on the first stage) to the node, hidden states or the logits
  // of the last token back. allLogits is not supported remotely (shoal::Error).
  void forward(const runtime::StageInput& input, runtime::StageOutput& output) override;
  void truncate(int32_t sequence, int32_t fromPosition) override;
  int32_t cachedPositions(int32_t sequence) const override;

  // Head stage only: run the batch and let the node sample the next token.
  int32_t forwardSample(const runtime::StageInput& input, const RemoteSampleParams& sampling);

  // Tell the node to drop the stage and wait for its answer. The destructor sends the same
  // request without waiting.
  void unload();

  const std::string& loadSource() const { return m_loadSource; }  // "local-file", ...
  double loadMs() const { return m_loadMs; }
  uint64_t weightBytesSent() const { return m_weightBytesSent; }

 private:
  RemoteStage(std::shared_ptr<Connection> connection, RemoteStageOptions options, int32_t nEmbd,
              int32_t nVocab);
  Message call(Message request, std::chrono::milliseconds timeout);
  Message sendForward(const runtime::StageInput& input, const nlohmann::json& sample);
  void streamWeights(const RemoteModel& model, const Message& needWeights,
                     const DeployProgressFn& progress);

  std::shared_ptr<Connection> m_connection;
  RemoteStageOptions m_options;
  int32_t m_nEmbd;
  int32_t m_nVocab;
  std::vector<int32_t> m_cached;  // positions cached per sequence, mirrored from our requests
  std::string m_loadSource;
  double m_loadMs = 0;
  uint64_t m_weightBytesSent = 0;
  bool m_loaded = false;
};

}  // namespace shoal::lan
