#pragma once
// Consecutive remote stages whose nodes forward to each other directly (issue 20,
// lan/node/stage_links.h), seen by the coordinator's Chain as one stage.
//
// submit() sends the batch's request to every node at once: token ids to the first, "rows from
// your link" to the others, "sample" (or logits) to the last; every node but the last pushes its
// output to the next node instead of replying with it. So a token crosses one network leg per
// stage (coordinator -> first, first -> second, ..., last -> coordinator) instead of two, and the
// requests to the later nodes travel while the first computes. wait() receives the replies in
// node order: acknowledgements, then the head's tokens or logits.
//
// pipelineDepth() is the number of nodes: the chain keeps that many batches in flight (a long
// prompt's micro-batches, the scheduler's groups), so every node works at once (pipelined
// prefill) without the coordinator relaying anything.
//
// Decoding ahead: a group of one part passes it to its node (RemoteStage::decodeAhead). A group
// of several parts whose head node is linked back to its first node (setRing: the coordinator
// made the ring, lan/node/stage_links.h) decodes ahead by sending the burst's `count` one-token
// forwards to every node at once: the first takes each token after the first from the ring, the
// head samples each and pushes it round (all but the burst's last). So a token costs one leg
// per stage and no coordinator round trip; the tokens are the token-by-token ones (each forward
// is the one-token batch a plain step sends, each draw seeded as decodeAheadLocally seeds it).
//
// A group of one part is a plain RemoteStage with no links. Errors: a node that fails throws
// TransportError (failedPart() says which; a TransportError of a later part is preferred over a
// LinkFailure of an earlier one, since a dead node breaks its neighbours' links too); a link
// that fails throws LinkFailure (the coordinator then relays).

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "engine/runtime/stage.h"
#include "lan/pool/remote_stage.h"

namespace shoal::lan {

class LinkedStages final : public runtime::Stage {
 public:
  // `parts` must join (each starts where the previous ends) and their nodes be linked in that
  // order; sets each part's link flags (RemoteStage::setLinks). Throws shoal::Error when empty.
  explicit LinkedStages(std::vector<std::shared_ptr<RemoteStage>> parts);
  ~LinkedStages() override;

  const runtime::StageSpec& spec() const override { return m_spec; }
  Ticket submit(const runtime::Batch& batch, runtime::StageOutput& output) override;
  void wait(Ticket ticket) override;
  int32_t truncate(int32_t sequence, int32_t fromPosition) override;
  int32_t cachedPositions(int32_t sequence) const override;
  size_t pipelineDepth() const override { return m_parts.size(); }
  // A group of one part decodes ahead where that part can (RemoteStage::decodeAhead); one of
  // several, round its ring (setRing).
  int32_t decodeAheadLimit() const override;
  std::vector<int32_t> decodeAhead(int32_t sequence, int32_t position, int32_t token, int32_t count,
                                   const runtime::SampleRequest& sample) override;

  // Whether the head's node pushes its sampled tokens to the first node (the coordinator linked
  // them; needs at least two parts, the first with the embedding, the last with the head).
  void setRing(bool linked);
  bool ring() const { return m_ring; }

  // The part whose submit/wait/truncate threw last.
  size_t failedPart() const { return m_failedPart; }
  const std::vector<std::shared_ptr<RemoteStage>>& parts() const { return m_parts; }

 private:
  struct InFlight {
    Ticket ticket = 0;
    std::vector<Ticket> tickets;  // one per part
    // The outputs of the parts before the last (acknowledgements only: they stay empty).
    std::vector<runtime::StageOutput> scratch;
  };
  // Forgets every batch in flight, on every part.
  void abandonAll();

  std::vector<std::shared_ptr<RemoteStage>> m_parts;
  runtime::StageSpec m_spec;
  std::deque<InFlight> m_inFlight;  // a deque: scratch outputs must not move while in flight
  Ticket m_submitted = 0;
  Ticket m_completed = 0;
  size_t m_failedPart = 0;
  bool m_ring = false;  // setRing
};

}  // namespace shoal::lan
