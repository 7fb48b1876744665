#include "engine/runtime/chain.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace shoal::runtime {
namespace {

std::vector<std::shared_ptr<Stage>> shared(std::vector<std::unique_ptr<Stage>> stages) {
  std::vector<std::shared_ptr<Stage>> out;
  for (auto& s : stages) out.push_back(std::move(s));
  return out;
}

}  // namespace

Chain::Chain(std::vector<std::unique_ptr<Stage>> stages) : Chain(shared(std::move(stages))) {}

Chain::Chain(std::vector<std::shared_ptr<Stage>> stages) : m_stages(std::move(stages)) {
  checkJoins();
}

void Chain::checkJoins() const {
  if (m_stages.empty()) throw Error("a chain needs at least one stage");
  for (const auto& s : m_stages) {
    if (!s) throw Error("a chain's stage is missing");
  }
  if (!m_stages.front()->spec().hasEmbedding)
    throw Error("the first stage must hold the embedding");
  if (!m_stages.back()->spec().hasHead) throw Error("the last stage must hold the output head");
  for (size_t i = 1; i < m_stages.size(); ++i) {
    const StageSpec& prev = m_stages[i - 1]->spec();
    const StageSpec& next = m_stages[i]->spec();
    if (prev.lastLayer != next.firstLayer) {
      throw Error("stages do not join: stage " + std::to_string(i - 1) + " ends at layer " +
                  std::to_string(prev.lastLayer) + ", stage " + std::to_string(i) +
                  " starts at layer " + std::to_string(next.firstLayer));
    }
    if (prev.hasHead || next.hasEmbedding) {
      throw Error("only the first stage may hold the embedding and only the last the head");
    }
  }
}

int32_t Chain::contextLength() const {
  int32_t n = m_stages.front()->spec().contextLength;
  for (const auto& s : m_stages) n = std::min(n, s->spec().contextLength);
  return n;
}

int32_t Chain::maxBatch() const {
  int32_t n = m_stages.front()->spec().maxBatch;
  for (const auto& s : m_stages) n = std::min(n, s->spec().maxBatch);
  return n;
}

size_t Chain::pipelineDepth() const {
  size_t n = 0;
  for (const auto& s : m_stages) n += std::max<size_t>(1, s->pipelineDepth());
  return n;
}

void Chain::forward(int32_t sequence, int32_t firstPosition, std::span<const int32_t> tokens,
                    StageOutput& out, LogitRows logits, const SampleRequest* sample,
                    bool decodeOrder) {
  if (tokens.empty()) throw Error("Chain::forward: no tokens");
  const size_t stages = m_stages.size();
  out.hidden.clear();
  out.logits.clear();
  out.tokens.clear();

  try {
    runWaves(sequence, firstPosition, tokens, out, logits, sample, decodeOrder);
  } catch (...) {
    const size_t failed = m_failedStage;
    for (size_t s = 0; s < stages; ++s) {
      if (s == failed) continue;
      try {
        m_stages[s]->truncate(sequence, firstPosition);
      } catch (const std::exception&) {
        // That stage is in trouble too; recovery (or the next truncate) deals with it.
      }
    }
    m_failedStage = failed;
    throw;
  }
}

void Chain::runWaves(int32_t sequence, int32_t firstPosition, std::span<const int32_t> tokens,
                     StageOutput& out, LogitRows logits, const SampleRequest* sample,
                     bool decodeOrder) {
  const size_t batch = static_cast<size_t>(maxBatch());
  const size_t n = (tokens.size() + batch - 1) / batch;
  // The micro-batches, one segment each; kept as members so that a decode step allocates nothing.
  m_microSegments.resize(n);
  m_microBatches.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t start = k * batch;
    const size_t count = std::min(batch, tokens.size() - start);
    Segment& seg = m_microSegments[k];
    seg.sequence = sequence;
    seg.firstPosition = firstPosition + static_cast<int32_t>(start);
    seg.count = static_cast<int32_t>(count);
    seg.logits = logits == LogitRows::All                  ? LogitRows::All
                 : logits == LogitRows::Last && k + 1 == n ? LogitRows::Last
                                                           : LogitRows::None;
    seg.decodeOrder = decodeOrder;
    Batch& b = m_microBatches[k];
    b.segments = std::span(&seg, 1);
    b.tokens = tokens.subspan(start, count);
    b.sample = seg.logits != LogitRows::None ? sample : nullptr;
  }
  if (n == 1) return forwardBatches(m_microBatches, std::span(&out, 1));
  m_microOuts.resize(n);
  forwardBatches(m_microBatches, m_microOuts);
  for (const StageOutput& head : m_microOuts) {
    out.logits.insert(out.logits.end(), head.logits.begin(), head.logits.end());
    out.tokens.insert(out.tokens.end(), head.tokens.begin(), head.tokens.end());
  }
}

void Chain::forward(int32_t sequence, int32_t firstPosition, std::span<const int32_t> tokens,
                    std::vector<float>& logits, bool allLogits) {
  StageOutput out;
  forward(sequence, firstPosition, tokens, out, allLogits ? LogitRows::All : LogitRows::Last);
  logits = std::move(out.logits);
}

void Chain::forwardBatch(const Batch& batch, StageOutput& out) {
  m_outputs.resize(2);
  for (auto& slot : m_outputs) slot.resize(m_stages.size());
  Batch b = batch;
  for (size_t s = 0; s < m_stages.size(); ++s) {
    StageOutput& o = s + 1 == m_stages.size() ? out : m_outputs[s % 2][s];
    if (s > 0) {
      b.tokens = {};
      b.hidden = m_outputs[(s - 1) % 2][s - 1].hidden;
    }
    m_failedStage = s;
    m_stages[s]->forward(b, o);
  }
}

void Chain::forwardBatches(std::span<const Batch> batches, std::span<StageOutput> outs) {
  if (batches.size() != outs.size()) throw Error("Chain::forwardBatches: one output per batch");
  if (batches.size() == 1) return forwardBatch(batches[0], outs[0]);
  const size_t stages = m_stages.size();
  const size_t n = batches.size();
  if (stages == 1) {
    // One stage that may span several devices: a window of its depth in flight, oldest waited
    // for first (submission order).
    Stage& only = *m_stages[0];
    const size_t depth = std::max<size_t>(1, only.pipelineDepth());
    m_failedStage = 0;
    std::vector<Stage::Ticket> window(n);
    for (size_t k = 0; k < n; ++k) {
      if (k >= depth) only.wait(window[k - depth]);
      window[k] = only.submit(batches[k], outs[k]);
    }
    for (size_t k = n > depth ? n - depth : 0; k < n; ++k) only.wait(window[k]);
    return;
  }
  m_outputs.resize(2);
  for (auto& slot : m_outputs) slot.resize(stages);
  std::vector<Stage::Ticket> tickets(stages);
  // Wave t runs batch t - s on stage s; batch k's stage-s output (slot k % 2) is read by stage
  // s + 1 in the next wave while stage s writes batch k + 1 into the other slot.
  for (size_t wave = 0; wave + 1 < n + stages; ++wave) {
    std::vector<size_t> active;
    for (size_t s = 0; s < stages; ++s) {
      if (wave < s || wave - s >= n) continue;
      const size_t k = wave - s;
      Batch b = batches[k];
      if (s > 0) {
        b.tokens = {};
        b.hidden = m_outputs[(k % 2)][s - 1].hidden;
      }
      StageOutput& o = s + 1 == stages ? outs[k] : m_outputs[k % 2][s];
      m_failedStage = s;
      tickets[s] = m_stages[s]->submit(b, o);
      active.push_back(s);
    }
    for (size_t s : active) {
      m_failedStage = s;
      m_stages[s]->wait(tickets[s]);
    }
  }
}

size_t Chain::asyncDepth() const {
  if (m_stages.size() != 1) return 0;
  const size_t depth = m_stages[0]->pipelineDepth();
  return depth > 1 ? depth : 0;
}

Stage::Ticket Chain::submit(const Batch& batch, StageOutput& out) {
  if (asyncDepth() == 0) throw Error("Chain::submit: the chain does not pipeline on its own");
  m_failedStage = 0;
  return m_stages[0]->submit(batch, out);
}

void Chain::wait(Stage::Ticket ticket) {
  if (asyncDepth() == 0) throw Error("Chain::wait: the chain does not pipeline on its own");
  m_failedStage = 0;
  m_stages[0]->wait(ticket);
}

int32_t Chain::decodeAheadLimit() const {
  return m_stages.size() == 1 ? m_stages[0]->decodeAheadLimit() : 0;
}

std::vector<int32_t> Chain::decodeAhead(int32_t sequence, int32_t position, int32_t token,
                                        int32_t count, const SampleRequest& sample) {
  if (decodeAheadLimit() < count) {
    throw Error("Chain::decodeAhead: the chain cannot decode " + std::to_string(count) +
                " tokens ahead");
  }
  m_failedStage = 0;
  return m_stages[0]->decodeAhead(sequence, position, token, count, sample);
}

int32_t Chain::truncate(int32_t sequence, int32_t fromPosition) {
  int32_t kept = fromPosition;
  for (size_t s = 0; s < m_stages.size(); ++s) {
    m_failedStage = s;
    kept = std::min(kept, m_stages[s]->truncate(sequence, fromPosition));
  }
  return kept;
}

}  // namespace shoal::runtime
