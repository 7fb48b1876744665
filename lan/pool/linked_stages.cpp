#include "lan/pool/linked_stages.h"

#include <algorithm>
#include <exception>

#include "engine/error.h"
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

int32_t LinkedStages::decodeAheadLimit() const {
  return m_parts.size() == 1 && m_inFlight.empty() ? m_parts.front()->decodeAheadLimit() : 0;
}

std::vector<int32_t> LinkedStages::decodeAhead(int32_t sequence, int32_t position, int32_t token,
                                               int32_t count,
                                               const runtime::SampleRequest& sample) {
  if (m_parts.size() != 1) throw Error("linked stages cannot decode ahead");
  m_failedPart = 0;
  return m_parts.front()->decodeAhead(sequence, position, token, count, sample);
}

int32_t LinkedStages::cachedPositions(int32_t sequence) const {
  return m_parts.front()->cachedPositions(sequence);
}

}  // namespace shoal::lan
