#include "lan/pool/remote_stage.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"
#include "engine/runtime/decode_ahead.h"

namespace shoal::lan {
namespace {

// The logits rows a segment returns on the head.
size_t logitsRowsOf(const runtime::Segment& s) {
  return s.logits == runtime::LogitRows::All    ? size_t(s.count)
         : s.logits == runtime::LogitRows::Last ? 1
                                                : 0;
}

}  // namespace

RemoteStage::RemoteStage(std::shared_ptr<NodeClient> client, const LoadStageRequest& request,
                         int32_t nLayer, int32_t nEmbd, int32_t nVocab)
    : m_client(std::move(client)),
      m_stageId(request.stageId),
      m_placement(request.placement),
      m_spec{m_placement.firstLayer, m_placement.lastLayer, m_placement.hasEmbedding,
             m_placement.hasHead,    request.contextLength, std::max(1, request.maxSequences),
             request.maxBatch},
      m_nEmbd(nEmbd),
      m_nVocab(nVocab),
      m_book("remote stage " + request.stageId, m_spec, nLayer, nVocab, nEmbd) {}

RemoteStage::~RemoteStage() {
  abandonAll();
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
      new RemoteStage(std::move(client), request, config.nLayer, config.nEmbd, config.nVocab));
  stage->m_loaded = stage->m_client->loadStage(request, model, progress, loadTimeout);
  stage->m_isLoaded = true;
  return stage;
}

runtime::Stage::Ticket RemoteStage::submit(const runtime::Batch& batch,
                                           runtime::StageOutput& output) {
  return submitLinked(batch, output, false, false);
}

runtime::Stage::Ticket RemoteStage::submitInRing(const runtime::Batch& batch,
                                                 runtime::StageOutput& output, bool tokensFromRing,
                                                 bool tokensToRing) {
  if ((tokensFromRing && !m_spec.hasEmbedding) || (tokensToRing && !m_spec.hasHead)) {
    throw Error("remote stage " + m_stageId + ": the ring joins the head to the first stage");
  }
  if (tokensToRing && !batch.sample) {
    throw Error("remote stage " + m_stageId + ": the ring carries sampled tokens only");
  }
  return submitLinked(batch, output, tokensFromRing, tokensToRing);
}

runtime::Stage::Ticket RemoteStage::submitLinked(const runtime::Batch& batch,
                                                 runtime::StageOutput& output, bool fromRing,
                                                 bool toRing) {
  // A batch whose tokens come round the ring carries none: its ids are checked where they land.
  m_book.check(batch, m_fromPrevious || fromRing);
  if (batch.segments.empty()) throw Error("remote stage " + m_stageId + ": a batch of no segment");
  InFlight f;
  f.output = &output;
  f.segments.assign(batch.segments.begin(), batch.segments.end());
  // The node samples one token per segment from its last row, or greedily from every row of
  // segments that want all rows (speculative verification); any other shape of logits rows
  // comes back as logits (a stage may ignore a SampleRequest).
  // Or each segment with its own request (Batch::samples), where the node takes them.
  const bool perSegment =
      m_segmentSample && f.segments.size() > 1 && batch.samples.size() == f.segments.size();
  const bool greedy = batch.sample && batch.sample->temperature <= 0;
  f.sampled = m_spec.hasHead && !m_toNext && (batch.sample || perSegment) &&
              std::all_of(f.segments.begin(), f.segments.end(), [&](const runtime::Segment& s) {
                const size_t i = size_t(&s - f.segments.data());
                const bool rowsGreedy = perSegment ? batch.samples[i].temperature <= 0 : greedy;
                return s.logits == runtime::LogitRows::Last ||
                       (s.logits == runtime::LogitRows::All && rowsGreedy);
              });
  try {
    // One request for the whole batch: the node runs its segments together, reading its weights
    // once (a batch of one segment names it at the top level).
    ForwardRequest r;
    r.stageId = m_stageId;
    if (f.segments.size() == 1) {
      const runtime::Segment& s = f.segments.front();
      r.sequence = s.sequence;
      r.firstPosition = s.firstPosition;
      r.count = s.count;
      r.logits = s.logits;
      r.decodeOrder = s.decodeOrder;
    } else {
      r.segments = f.segments;
    }
    r.fromLink = m_fromPrevious || fromRing;
    r.toLink = m_toNext || toRing;
    if (m_spec.hasEmbedding) {
      r.tokens = batch.tokens;
    } else if (!m_fromPrevious) {
      r.hidden = batch.hidden;
    }
    if (f.sampled && perSegment) {
      r.segmentSamples = batch.samples;
    } else if (f.sampled) {
      r.sample = batch.sample;
    }
    f.requests.push_back(m_client->sendForward(r));
  } catch (...) {
    for (NodeClient::RequestId id : f.requests) m_client->abandon(id);
    throw;
  }
  m_book.commit(batch);
  f.ticket = ++m_submitted;
  m_inFlight.push_back(std::move(f));
  return m_submitted;
}

void RemoteStage::completeBatched(InFlight& f) {
  runtime::StageOutput& out = *f.output;
  ForwardReply r = m_client->receiveForward(f.requests.front());
  f.requests.front() = 0;  // received
  const std::string who = "node " + m_client->peerAddress() + ": stage " + m_stageId;
  if (m_toNext) {
    if (!r.forwarded) throw Error(who + " returned its rows instead of passing them on");
    return;
  }
  if (f.sampled) {
    if (r.segmentTokens.size() != f.segments.size()) {
      throw Error(who + " returned sampled tokens for " + std::to_string(r.segmentTokens.size()) +
                  " segments, expected " + std::to_string(f.segments.size()));
    }
    for (size_t i = 0; i < f.segments.size(); ++i) {
      const std::vector<int32_t>& tokens = r.segmentTokens[i];
      if (tokens.size() != logitsRowsOf(f.segments[i])) {
        throw Error(who + " returned " + std::to_string(tokens.size()) +
                    " sampled tokens for a segment of " +
                    std::to_string(logitsRowsOf(f.segments[i])) + " logits rows");
      }
      for (int32_t t : tokens) {
        if (t < 0 || t >= m_nVocab) {
          throw Error(who + " returned no valid token (got " + std::to_string(t) + ", vocabulary " +
                      std::to_string(m_nVocab) + ")");
        }
        out.tokens.push_back(t);
      }
    }
    return;
  }
  size_t expected = 0;
  for (const runtime::Segment& s : f.segments) {
    expected +=
        m_spec.hasHead ? logitsRowsOf(s) * size_t(m_nVocab) : size_t(s.count) * size_t(m_nEmbd);
  }
  if (r.values.size() != expected) {
    throw Error(who + " returned " + std::to_string(r.values.size()) + " floats, expected " +
                std::to_string(expected));
  }
  (m_spec.hasHead ? out.logits : out.hidden) = std::move(r.values);
}

void RemoteStage::complete(InFlight& f) {
  runtime::StageOutput& out = *f.output;
  out.hidden.clear();
  out.logits.clear();
  out.tokens.clear();
  if (f.segments.size() > 1) return completeBatched(f);
  for (size_t i = 0; i < f.requests.size(); ++i) {
    const runtime::Segment& s = f.segments[i];
    ForwardReply r = m_client->receiveForward(f.requests[i]);
    f.requests[i] = 0;  // received
    if (m_toNext) {
      if (!r.forwarded) {
        throw Error("node " + m_client->peerAddress() + ": stage " + m_stageId +
                    " returned its rows instead of passing them on");
      }
      continue;
    }
    if (f.sampled) {
      const bool everyRow = s.logits == runtime::LogitRows::All;
      const std::vector<int32_t> one{r.token};
      const std::vector<int32_t>& tokens = everyRow ? r.tokens : one;
      if (tokens.size() != (everyRow ? size_t(s.count) : 1)) {
        throw Error("node " + m_client->peerAddress() + ": stage " + m_stageId + " returned " +
                    std::to_string(tokens.size()) + " sampled tokens for " +
                    std::to_string(everyRow ? s.count : 1) + " rows");
      }
      for (int32_t t : tokens) {
        if (t < 0 || t >= m_nVocab) {
          throw Error("node " + m_client->peerAddress() + ": stage " + m_stageId +
                      " returned no valid token (got " + std::to_string(t) + ", vocabulary " +
                      std::to_string(m_nVocab) + ")");
        }
        out.tokens.push_back(t);
      }
      continue;
    }
    const size_t expected =
        m_spec.hasHead ? logitsRowsOf(s) * size_t(m_nVocab) : size_t(s.count) * size_t(m_nEmbd);
    if (r.values.size() != expected) {
      throw Error("node " + m_client->peerAddress() + ": stage " + m_stageId + " returned " +
                  std::to_string(r.values.size()) + " floats, expected " +
                  std::to_string(expected));
    }
    std::vector<float>& dst = m_spec.hasHead ? out.logits : out.hidden;
    dst.insert(dst.end(), r.values.begin(), r.values.end());
  }
}

void RemoteStage::wait(Ticket ticket) {
  if (ticket == 0 || ticket > m_submitted) {
    throw Error("remote stage " + m_stageId + ": wait for a batch never submitted");
  }
  if (ticket <= m_completed) {
    throw Error("remote stage " + m_stageId + ": wait for a batch already completed or dropped");
  }
  // Batches complete in submission order: older ones still in flight complete first.
  while (!m_inFlight.empty() && m_inFlight.front().ticket <= ticket) {
    InFlight f = std::move(m_inFlight.front());
    m_inFlight.pop_front();
    m_completed = f.ticket;
    try {
      complete(f);
    } catch (...) {
      for (NodeClient::RequestId id : f.requests) {
        if (id != 0) m_client->abandon(id);
      }
      throw;
    }
  }
}

void RemoteStage::abandonAll() {
  for (const InFlight& f : m_inFlight) {
    for (NodeClient::RequestId id : f.requests) {
      if (id != 0) m_client->abandon(id);
    }
  }
  m_inFlight.clear();
  m_completed = m_submitted;
}

int32_t RemoteStage::truncate(int32_t sequence, int32_t fromPosition) {
  abandonAll();
  const int32_t kept = m_client->truncate(m_stageId, sequence, fromPosition);
  return std::min(kept, m_book.truncate(sequence, kept));
}

int32_t RemoteStage::cachedPositions(int32_t sequence) const { return m_book.cached(sequence); }

void RemoteStage::setLinks(bool fromPrevious, bool toNext) {
  abandonAll();  // batches of the chain this stage was in before (a failure left them)
  m_fromPrevious = fromPrevious && !m_spec.hasEmbedding;
  m_toNext = toNext && !m_spec.hasHead;
}

int32_t RemoteStage::decodeAheadLimit() const {
  const bool whole = m_spec.hasEmbedding && m_spec.hasHead && !m_fromPrevious && !m_toNext;
  return m_decodeAhead && whole ? runtime::kMaxDecodeAhead : 0;
}

std::vector<int32_t> RemoteStage::decodeAhead(int32_t sequence, int32_t position, int32_t token,
                                              int32_t count, const runtime::SampleRequest& sample) {
  const std::string who = "node " + m_client->peerAddress() + ": stage " + m_stageId;
  if (count < 1 || count > decodeAheadLimit()) {
    throw Error("remote stage " + m_stageId + " cannot decode " + std::to_string(count) +
                " tokens ahead");
  }
  if (!m_inFlight.empty()) throw Error("remote stage " + m_stageId + ": batches in flight");
  // Checked as the one-token batch it starts with; counted as the `count` positions it fills.
  const runtime::Segment first{sequence, position, 1, runtime::LogitRows::Last};
  runtime::Batch batch;
  batch.tokens = std::span(&token, 1);
  batch.segments = std::span(&first, 1);
  m_book.check(batch);
  ForwardRequest r;
  r.stageId = m_stageId;
  r.sequence = sequence;
  r.firstPosition = position;
  r.count = 1;
  r.logits = runtime::LogitRows::Last;
  r.tokens = batch.tokens;
  r.sample = &sample;
  r.decodeAhead = count;
  const ForwardReply reply = m_client->forward(r);
  if (reply.tokens.size() != static_cast<size_t>(count)) {
    throw Error(who + " decoded " + std::to_string(reply.tokens.size()) + " tokens ahead, not " +
                std::to_string(count));
  }
  for (int32_t t : reply.tokens) {
    if (t < 0 || t >= m_nVocab) {
      throw Error(who + " returned no valid token (got " + std::to_string(t) + ", vocabulary " +
                  std::to_string(m_nVocab) + ")");
    }
  }
  // The node cached the given token and all but the last decoded one.
  std::vector<int32_t> fed{token};
  fed.insert(fed.end(), reply.tokens.begin(), reply.tokens.end() - 1);
  const runtime::Segment all{sequence, position, count, runtime::LogitRows::Last};
  runtime::Batch filled;
  filled.tokens = fed;
  filled.segments = std::span(&all, 1);
  m_book.commit(filled);
  return reply.tokens;
}

void RemoteStage::unload() {
  if (!m_isLoaded || !m_client->isOpen()) return;
  m_isLoaded = false;
  m_client->unloadStage(m_stageId);
}

}  // namespace shoal::lan
