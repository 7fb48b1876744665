#pragma once
// A stage whose layers run on another node of the pool: the coordinator's proxy for a stage
// hosted by lan/node's NodeHost. It has the runtime::Stage interface, so it stands wherever a
// local stage does (the Coordinator's Chain): submit() sends the batch through the node's
// NodeClient, one forward request per batch (its segments: one per sequence, which the node runs
// together, reading its weights once for all), and wait() receives the replies, so several
// batches may be in flight on one stage. The protocol itself lives in NodeClient only.
//
// The head samples on its node when the batch carries a SampleRequest and every segment wants
// the logits of its last row (StageOutput::tokens, no logits cross the network); otherwise it
// returns logits.
//
// Threading: like every Stage, one thread drives it. Several RemoteStages may share one
// NodeClient (two stages on one node); their requests interleave with the telemetry poller's.
//
// Errors: a refusal reported by the node throws shoal::Error ("node <addr>: <message>"); network
// failures (timeout, closed) throw TransportError (lan/transport/connection.h).

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/stage.h"
#include "engine/runtime/stage_sequences.h"
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
  // Checks the batch (SequenceBook) and sends its segments to the node.
  Ticket submit(const runtime::Batch& batch, runtime::StageOutput& output) override;
  // submit() within a burst decoded round the ring (LinkedStages::decodeAhead over several
  // nodes, lan/node/stage_links.h): tokensFromRing, the first stage takes its token ids from
  // what the head's node pushed (the batch carries none); tokensToRing, the head samples
  // (batch.sample required) and also pushes its tokens to the first stage's node. The output
  // is what submit() gives. Throws shoal::Error for a flag on a stage without that end.
  Ticket submitInRing(const runtime::Batch& batch, runtime::StageOutput& output,
                      bool tokensFromRing, bool tokensToRing);
  // Receives the replies of the batch (and of any older batch still in flight) into its output:
  // hidden states, logits rows, or the tokens the node sampled (each checked against the
  // vocabulary).
  void wait(Ticket ticket) override;
  // Batches still in flight are abandoned (their replies skipped); the node applies the
  // truncate after them, as it answers in order.
  int32_t truncate(int32_t sequence, int32_t fromPosition) override;
  // Mirrored from the requests this proxy sent (the node is not asked).
  int32_t cachedPositions(int32_t sequence) const override;

  // Drops the stage on the node and waits for its answer (the destructor then sends nothing).
  void unload();

  // Decoding ahead (Stage::decodeAhead): one forward request that the node answers with
  // `count` tokens. Only where the node understands it (setDecodeAhead: the coordinator knows
  // from its node_info) and the stage holds the whole model, unlinked.
  int32_t decodeAheadLimit() const override;
  std::vector<int32_t> decodeAhead(int32_t sequence, int32_t position, int32_t token, int32_t count,
                                   const runtime::SampleRequest& sample) override;
  void setDecodeAhead(bool nodeSupportsIt) { m_decodeAhead = nodeSupportsIt; }
  // Whether the node samples each segment with its own request (kFeatureSegmentSample): a
  // batch's Batch::samples then go to it, else such a batch's logits come back.
  void setSegmentSample(bool nodeSupportsIt) { m_segmentSample = nodeSupportsIt; }
  // Whether the node takes part in a ring (kFeatureDecodeRing; the coordinator links only such
  // first and head stages).
  void setDecodeRing(bool nodeSupportsIt) { m_decodeRing = nodeSupportsIt; }
  bool decodeRing() const { return m_decodeRing; }

  // Direct forwarding (lan/node/stage_links.h; LinkedStages sets these): fromPrevious, the rows
  // come down the link from the previous stage's node (submit() sends none of batch.hidden);
  // toNext, the output goes down the link to the next one (wait() leaves the output empty).
  // Batches still in flight (of the chain the stage was in before) are abandoned.
  void setLinks(bool fromPrevious, bool toNext);
  // Forgets every batch in flight (their replies are skipped when they come); the positions
  // they counted stay counted: truncate to rewrite them.
  void abandonInFlight() { abandonAll(); }
  bool linkedToNext() const { return m_toNext; }

  const std::string& stageId() const { return m_stageId; }
  const StagePlacement& placement() const { return m_placement; }
  const LoadStageResult& loaded() const { return m_loaded; }  // source, load ms, bytes streamed
  const std::shared_ptr<NodeClient>& client() const { return m_client; }

 private:
  // A batch sent and not yet waited for.
  struct InFlight {
    Ticket ticket = 0;
    runtime::StageOutput* output = nullptr;
    std::vector<runtime::Segment> segments;
    std::vector<NodeClient::RequestId> requests;  // one per segment
    bool sampled = false;                         // the node samples: tokens come back
  };

  RemoteStage(std::shared_ptr<NodeClient> client, const LoadStageRequest& request, int32_t nLayer,
              int32_t nEmbd, int32_t nVocab);
  Ticket submitLinked(const runtime::Batch& batch, runtime::StageOutput& output, bool fromRing,
                      bool toRing);
  // Receives the replies of the oldest batch in flight into its output.
  void complete(InFlight& batch);
  // complete() for a batch of several segments, sent as one request (the node runs them
  // together).
  void completeBatched(InFlight& batch);
  void abandonAll();

  std::shared_ptr<NodeClient> m_client;
  std::string m_stageId;
  StagePlacement m_placement;
  runtime::StageSpec m_spec;
  int32_t m_nEmbd;
  int32_t m_nVocab;
  runtime::SequenceBook m_book;  // positions cached per sequence, as sent
  std::deque<InFlight> m_inFlight;
  Ticket m_submitted = 0;
  Ticket m_completed = 0;  // the last ticket waited for (or dropped by truncate)
  LoadStageResult m_loaded;
  bool m_isLoaded = false;
  bool m_fromPrevious = false;  // setLinks
  bool m_toNext = false;
  bool m_decodeAhead = false;    // setDecodeAhead
  bool m_segmentSample = false;  // setSegmentSample
  bool m_decodeRing = false;     // setDecodeRing
};

}  // namespace shoal::lan
