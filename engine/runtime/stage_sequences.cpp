#include "engine/runtime/stage_sequences.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/model/kv_ring.h"

namespace shoal::runtime {
namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

SequenceBook::SequenceBook(std::string who, const StageSpec& spec, int32_t nLayer, int32_t nVocab,
                           int32_t nEmbd)
    : m_who(std::move(who)), m_spec(spec), m_nVocab(nVocab), m_nEmbd(nEmbd) {
  if (spec.firstLayer < 0 || spec.lastLayer > nLayer || spec.firstLayer > spec.lastLayer) {
    throw Error(m_who + ": layer range [" + std::to_string(spec.firstLayer) + ", " +
                std::to_string(spec.lastLayer) + ") is outside the model's " +
                std::to_string(nLayer) + " layers");
  }
  if (spec.contextLength <= 0 || spec.maxSequences <= 0 || spec.maxBatch <= 0) {
    throw Error(m_who + ": context length, sequences and batch must be positive");
  }
  m_cached.assign(sz(spec.maxSequences), 0);
  m_highWater.assign(sz(spec.maxSequences), 0);
}

void SequenceBook::check(const Batch& batch, bool rowsElsewhere) const {
  if (batch.segments.empty()) throw Error(m_who + ": a batch without segments");
  int64_t rows = 0;
  for (size_t i = 0; i < batch.segments.size(); ++i) {
    const Segment& s = batch.segments[i];
    if (s.sequence < 0 || s.sequence >= m_spec.maxSequences) {
      throw Error(m_who + ": sequence " + std::to_string(s.sequence) + " out of range");
    }
    for (size_t j = 0; j < i; ++j) {
      if (batch.segments[j].sequence == s.sequence) {
        throw Error(m_who + ": sequence " + std::to_string(s.sequence) + " twice in one batch");
      }
    }
    if (s.count <= 0) throw Error(m_who + ": a segment of " + std::to_string(s.count) + " rows");
    const int32_t cached = m_cached[sz(s.sequence)];
    if (s.firstPosition < 0 || s.firstPosition > cached ||
        int64_t(s.firstPosition) + s.count > m_spec.contextLength) {
      throw Error(m_who + ": positions [" + std::to_string(s.firstPosition) + ", " +
                  std::to_string(int64_t(s.firstPosition) + s.count) + ") do not follow the " +
                  std::to_string(cached) + " cached positions within a context of " +
                  std::to_string(m_spec.contextLength));
    }
    if (s.firstPosition > 0 && s.firstPosition < resumeFloor(s.sequence)) {
      throw Error(m_who + ": sequence " + std::to_string(s.sequence) + " cannot resume at " +
                  std::to_string(s.firstPosition) +
                  ": its sliding-window cache no longer holds the positions before it (the "
                  "earliest is " +
                  std::to_string(resumeFloor(s.sequence)) + "; truncate to 0 and start over)");
    }
    rows += s.count;
  }
  if (rows > m_spec.maxBatch) {
    throw Error(m_who + ": batch of " + std::to_string(rows) + " tokens (max " +
                std::to_string(m_spec.maxBatch) + ")");
  }
  if (rowsElsewhere) {
    // The rows (hidden states, or a first stage's token ids) arrive another way: nothing to check.
  } else if (m_spec.hasEmbedding) {
    if (batch.tokens.size() != sz(rows)) {
      throw Error(m_who + ": " + std::to_string(batch.tokens.size()) + " token ids for " +
                  std::to_string(rows) + " rows");
    }
    for (int32_t t : batch.tokens) {
      if (t < 0 || t >= m_nVocab) {
        throw Error(m_who + ": token id " + std::to_string(t) + " outside the vocabulary");
      }
    }
  } else if (batch.hidden.size() != sz(rows) * sz(m_nEmbd)) {
    throw Error(m_who + ": expected " + std::to_string(rows) + " x " + std::to_string(m_nEmbd) +
                " hidden values, got " + std::to_string(batch.hidden.size()));
  }
}

void SequenceBook::commit(const Batch& batch) {
  for (const Segment& s : batch.segments) {
    const int32_t end = s.firstPosition + s.count;
    m_cached[sz(s.sequence)] = end;
    // Positions at and after the first are rewritten: a rewind does not lower the mark (the
    // ring slots of the positions it forgot still hold what overwrote older ones).
    m_highWater[sz(s.sequence)] =
        s.firstPosition == 0 ? end : std::max(m_highWater[sz(s.sequence)], end);
  }
}

int32_t SequenceBook::truncate(int32_t sequence, int32_t fromPosition) {
  if (sequence < 0 || sequence >= m_spec.maxSequences) {
    throw Error(m_who + ": sequence " + std::to_string(sequence) + " out of range");
  }
  int32_t kept = std::clamp(fromPosition, 0, m_cached[sz(sequence)]);
  if (kept > 0 && kept < resumeFloor(sequence)) kept = 0;
  m_cached[sz(sequence)] = kept;
  if (kept == 0) m_highWater[sz(sequence)] = 0;
  return kept;
}

void SequenceBook::keepRing(int32_t period, int32_t window) {
  for (const Ring& r : m_rings) {
    if (r.period == period && r.window == window) return;
  }
  m_rings.push_back({period, window});
}

int32_t SequenceBook::resumeFloor(int32_t sequence) const {
  if (sequence < 0 || sequence >= m_spec.maxSequences) return 0;
  int32_t floor = 0;
  for (const Ring& r : m_rings) {
    floor =
        std::max(floor, model::kvRingResumeFloor(r.period, r.window, m_highWater[sz(sequence)]));
  }
  return floor;
}

int32_t SequenceBook::cached(int32_t sequence) const {
  if (sequence < 0 || sequence >= m_spec.maxSequences) return 0;
  return m_cached[sz(sequence)];
}

int32_t SequenceBook::logitRows(const Batch& batch) {
  int32_t n = 0;
  for (const Segment& s : batch.segments) {
    n += s.logits == LogitRows::All ? s.count : s.logits == LogitRows::Last ? 1 : 0;
  }
  return n;
}

std::vector<int32_t> Stage::decodeAhead(int32_t, int32_t, int32_t, int32_t, const SampleRequest&) {
  throw Error("this stage cannot decode ahead");
}

Stage::Ticket LocalStage::submit(const Batch& batch, StageOutput& output) {
  run(batch, output);
  return ++m_submitted;
}

void LocalStage::wait(Ticket ticket) {
  if (ticket == 0 || ticket > m_submitted) throw Error("stage: wait for a batch never submitted");
}

}  // namespace shoal::runtime
