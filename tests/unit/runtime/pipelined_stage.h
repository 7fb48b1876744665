#pragma once
// A local stage dressed as a pool of nodes linked directly (lan/pool/linked_stages.h): it keeps
// up to `depth` batches in flight (pipelineDepth), computes each only when it is waited for, as
// a remote stage receives its reply in wait(), and forgets every batch in flight when a truncate
// comes or a submit fails (RemoteStage's rule). It counts what a test of the scheduler's
// pipelined steps checks: the most batches in flight at once, and truncates that found batches
// in flight (which would have lost them).

#include <algorithm>
#include <cstddef>
#include <deque>
#include <memory>
#include <stdexcept>
#include <vector>

#include "engine/error.h"
#include "engine/runtime/stage.h"

namespace shoal::test {

class PipelinedStage final : public runtime::Stage {
 public:
  // failAtSubmit: that submit (counting from 1) throws "stage lost", once; 0: never.
  PipelinedStage(std::unique_ptr<runtime::Stage> inner, size_t depth, int failAtSubmit = 0)
      : m_inner(std::move(inner)), m_depth(depth), m_failAt(failAtSubmit) {}

  const runtime::StageSpec& spec() const override { return m_inner->spec(); }
  size_t pipelineDepth() const override { return m_depth; }

  Ticket submit(const runtime::Batch& batch, runtime::StageOutput& output) override {
    if (++m_submits == m_failAt) {
      m_lostInFlight = m_pending.size();
      m_pending.clear();  // a failure forgets every batch in flight
      m_completed = m_submitted;
      throw std::runtime_error("stage lost");
    }
    Pending& p = m_pending.emplace_back();
    p.ticket = ++m_submitted;
    p.tokens.assign(batch.tokens.begin(), batch.tokens.end());
    p.hidden.assign(batch.hidden.begin(), batch.hidden.end());
    p.segments.assign(batch.segments.begin(), batch.segments.end());
    if (batch.sample) p.sample = *batch.sample;
    p.sampled = batch.sample != nullptr;
    p.output = &output;
    m_mostInFlight = std::max(m_mostInFlight, m_pending.size());
    return p.ticket;
  }

  void wait(Ticket ticket) override {
    if (ticket == 0 || ticket > m_submitted || ticket <= m_completed) {
      throw Error("pipelined stage: wait for a batch not in flight");
    }
    while (!m_pending.empty() && m_pending.front().ticket <= ticket) {
      Pending p = std::move(m_pending.front());
      m_pending.pop_front();
      runtime::Batch b;
      b.tokens = p.tokens;
      b.hidden = p.hidden;
      b.segments = p.segments;
      b.sample = p.sampled ? &p.sample : nullptr;
      m_inner->forward(b, *p.output);
      m_completed = p.ticket;
    }
  }

  int32_t truncate(int32_t sequence, int32_t fromPosition) override {
    if (!m_pending.empty()) ++m_truncatesInFlight;
    m_pending.clear();
    m_completed = m_submitted;
    return m_inner->truncate(sequence, fromPosition);
  }
  int32_t cachedPositions(int32_t sequence) const override {
    return m_inner->cachedPositions(sequence);  // batches in flight not counted
  }

  size_t mostInFlight() const { return m_mostInFlight; }
  int truncatesInFlight() const { return m_truncatesInFlight; }
  bool failed() const { return m_failAt > 0 && m_submits >= m_failAt; }
  size_t lostInFlight() const { return m_lostInFlight; }  // batches out when the submit failed

 private:
  struct Pending {
    Ticket ticket = 0;
    std::vector<int32_t> tokens;
    std::vector<float> hidden;
    std::vector<runtime::Segment> segments;
    runtime::SampleRequest sample;
    bool sampled = false;
    runtime::StageOutput* output = nullptr;
  };

  std::unique_ptr<runtime::Stage> m_inner;
  size_t m_depth;
  int m_failAt;
  int m_submits = 0;
  std::deque<Pending> m_pending;
  Ticket m_submitted = 0;
  Ticket m_completed = 0;
  size_t m_mostInFlight = 0;
  int m_truncatesInFlight = 0;
  size_t m_lostInFlight = 0;
};

}  // namespace shoal::test
