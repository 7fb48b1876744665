#include "lan/pool/linked_stages.h"

#include <algorithm>
#include <exception>

#include "engine/error.h"
#include "engine/runtime/decode_ahead.h"
#include "lan/transport/connection.h"

namespace shoal::lan {

LinkedStages::LinkedStages(std::vector<std::shared_ptr<RemoteStage>> parts)
    : m_parts(std::move(parts)) {
  if (m_parts.empty()) throw Error("LinkedStages: no stage");
  m_spec = m_parts.front()->spec();
  m_spec.lastLayer = m_parts.back()->spec().lastLayer;
  m_spec.hasHead = m_parts.back()->spec().hasHead;
  for (size_t i = 0; i < m_parts.size(); ++i) {
    const runtime::StageSpec& s = m_parts[i]->spec();
    if (i > 0 && m_parts[i - 1]->spec().lastLayer != s.firstLayer) {
      throw Error("LinkedStages: stages do not join at layer " + std::to_string(s.firstLayer));
    }
    m_spec.contextLength = std::min(m_spec.contextLength, s.contextLength);
    m_spec.maxSequences = std::min(m_spec.maxSequences, s.maxSequences);
    m_spec.maxBatch = std::min(m_spec.maxBatch, s.maxBatch);
    m_parts[i]->setLinks(i > 0, i + 1 < m_parts.size());
  }
}

LinkedStages::~LinkedStages() { abandonAll(); }

void LinkedStages::abandonAll() {
  for (const auto& p : m_parts) p->abandonInFlight();
  m_inFlight.clear();
  m_completed = m_submitted;
}

runtime::Stage::Ticket LinkedStages::submit(const runtime::Batch& batch,
                                            runtime::StageOutput& output) {
  InFlight& f = m_inFlight.emplace_back();
  f.ticket = m_submitted + 1;
  f.scratch.resize(m_parts.size() - 1);
  try {
    for (size_t i = 0; i < m_parts.size(); ++i) {
      runtime::Batch b = batch;
      if (i > 0) {  // the rows come down the link from the previous node
        b.tokens = {};
        b.hidden = {};
      }
      if (i + 1 < m_parts.size()) {
        b.sample = nullptr;
        b.samples = {};
      }
      m_failedPart = i;
      f.tickets.push_back(m_parts[i]->submit(b, i + 1 < m_parts.size() ? f.scratch[i] : output));
    }
  } catch (...) {
    // Parts before the one that threw have the batch in flight: nothing of it may stay.
    ++m_submitted;
    abandonAll();
    throw;
  }
  return ++m_submitted;
}

void LinkedStages::wait(Ticket ticket) {
  if (ticket == 0 || ticket > m_submitted || ticket <= m_completed) {
    throw Error("linked stages: wait for a batch not in flight");
  }
  while (!m_inFlight.empty() && m_inFlight.front().ticket <= ticket) {
    InFlight& f = m_inFlight.front();
    // Every part's reply is received even after one failed: a node that died fails its
    // neighbours' links too, and the dead node (TransportError) is what recovery must know.
    std::exception_ptr first;
    size_t firstPart = 0;
    std::exception_ptr transport;
    size_t transportPart = 0;
    for (size_t i = 0; i < m_parts.size(); ++i) {
      try {
        m_parts[i]->wait(f.tickets[i]);
      } catch (const TransportError&) {
        if (!transport) {
          transport = std::current_exception();
          transportPart = i;
        }
      } catch (...) {
        if (!first) {
          first = std::current_exception();
          firstPart = i;
        }
      }
    }
    if (transport || first) {
      m_failedPart = transport ? transportPart : firstPart;
      abandonAll();
      std::rethrow_exception(transport ? transport : first);
    }
    m_completed = f.ticket;
    m_inFlight.pop_front();
  }
}

int32_t LinkedStages::truncate(int32_t sequence, int32_t fromPosition) {
  m_inFlight.clear();
  m_completed = m_submitted;
  int32_t kept = fromPosition;
  for (size_t i = 0; i < m_parts.size(); ++i) {
    m_failedPart = i;
    kept = std::min(kept, m_parts[i]->truncate(sequence, fromPosition));
  }
  return kept;
}

void LinkedStages::setRing(bool linked) {
  m_ring = linked && m_parts.size() > 1 && m_spec.hasEmbedding && m_spec.hasHead;
}

int32_t LinkedStages::decodeAheadLimit() const {
  if (!m_inFlight.empty()) return 0;
  if (m_parts.size() == 1) return m_parts.front()->decodeAheadLimit();
  return m_ring ? runtime::kMaxDecodeAhead : 0;
}

std::vector<int32_t> LinkedStages::decodeAhead(int32_t sequence, int32_t position, int32_t token,
                                               int32_t count,
                                               const runtime::SampleRequest& sample) {
  if (m_parts.size() == 1) {
    m_failedPart = 0;
    return m_parts.front()->decodeAhead(sequence, position, token, count, sample);
  }
  if (count < 1 || count > decodeAheadLimit()) {
    throw Error("linked stages cannot decode " + std::to_string(count) + " tokens ahead");
  }
  // Each draw j as decodeAheadLocally makes it: a fresh sampler seeded sample.seed + j.
  std::vector<runtime::SampleRequest> draws(static_cast<size_t>(count), sample);
  std::vector<runtime::Segment> segments(static_cast<size_t>(count));
  std::vector<runtime::StageOutput> outputs(static_cast<size_t>(count));
  for (int32_t j = 0; j < count; ++j) {
    draws[size_t(j)].seed = sample.seed + uint64_t(j);
    segments[size_t(j)] = runtime::Segment{sequence, position + j, 1, runtime::LogitRows::Last};
  }
  const size_t last = m_parts.size() - 1;
  for (int32_t j = 0; j < count; ++j) {
    InFlight& f = m_inFlight.emplace_back();
    f.ticket = m_submitted + 1;
    f.scratch.resize(last);
    try {
      for (size_t i = 0; i <= last; ++i) {
        runtime::Batch b;
        b.segments = std::span(&segments[size_t(j)], 1);
        if (i == 0 && j == 0) b.tokens = std::span(&token, 1);
        if (i == last) b.sample = &draws[size_t(j)];
        m_failedPart = i;
        runtime::StageOutput& out = i == last ? outputs[size_t(j)] : f.scratch[i];
        f.tickets.push_back(i == 0      ? m_parts[i]->submitInRing(b, out, j > 0, false)
                            : i == last ? m_parts[i]->submitInRing(b, out, false, j + 1 < count)
                                        : m_parts[i]->submit(b, out));
      }
    } catch (...) {
      ++m_submitted;
      abandonAll();
      throw;
    }
    ++m_submitted;
  }
  wait(m_submitted);  // in order; throws (everything abandoned) as a plain batch's wait does
  std::vector<int32_t> tokens;
  for (const runtime::StageOutput& out : outputs) {
    if (out.tokens.size() != 1) throw Error("linked stages: the head returned no token");
    tokens.push_back(out.tokens.front());
  }
  return tokens;
}

int32_t LinkedStages::cachedPositions(int32_t sequence) const {
  return m_parts.front()->cachedPositions(sequence);
}

}  // namespace shoal::lan
