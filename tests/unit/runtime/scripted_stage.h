#pragma once
// A Stage for tests: holds no weights; its logits make a scripted token the argmax at each step,
// so session behaviour (stop strings, end of generation, limits, streaming, recovery) can be
// tested without a model's numerics. It records every batch, can fail once on request, and can
// play a head stage that samples (returns tokens instead of logits).

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <vector>

#include "engine/runtime/stage_sequences.h"

namespace shoal::test {

class ScriptedStage final : public runtime::LocalStage {
 public:
  struct Call {
    int32_t firstPosition;
    int32_t count;
    bool sampleRequested;
    uint64_t seed;  // of the sample request, 0 without one
  };

  // next[i] is the token whose logit is highest after i tokens have been cached in total.
  ScriptedStage(int32_t vocab, int32_t contextLength, std::vector<int32_t> next)
      : m_vocab(vocab), m_next(std::move(next)) {
    m_spec.firstLayer = 0;
    m_spec.lastLayer = 1;
    m_spec.hasEmbedding = m_spec.hasHead = true;
    m_spec.contextLength = contextLength;
    m_spec.maxBatch = 64;
  }

  const runtime::StageSpec& spec() const override { return m_spec; }

  int32_t truncate(int32_t, int32_t fromPosition) override {
    m_cached = std::min(m_cached, fromPosition);
    return m_cached;
  }
  int32_t cachedPositions(int32_t) const override { return m_cached; }

  const std::vector<Call>& calls() const { return m_calls; }
  // The next batch that reaches past `position` throws (once), leaving the cache as it was.
  void failOnceAt(int32_t position) { m_failAt = position; }
  // Answer sample requests with the scripted token instead of logits, as a remote head does.
  void sampleWhenAsked(bool on) { m_samples = on; }

 protected:
  void run(const runtime::Batch& batch, runtime::StageOutput& out) override {
    if (batch.segments.size() != 1) throw std::logic_error("one segment per batch expected");
    const runtime::Segment& s = batch.segments[0];
    if (s.firstPosition > m_cached) throw std::logic_error("gap in positions");
    if (m_failAt && s.firstPosition + s.count > *m_failAt) {
      m_failAt.reset();
      throw std::runtime_error("scripted stage failure");
    }
    m_calls.push_back(
        {s.firstPosition, s.count, batch.sample != nullptr, batch.sample ? batch.sample->seed : 0});
    m_cached = s.firstPosition + s.count;
    out.logits.clear();
    out.tokens.clear();
    for (int32_t row = 0; row < s.count; ++row) {
      const bool wanted = s.logits == runtime::LogitRows::All ||
                          (s.logits == runtime::LogitRows::Last && row + 1 == s.count);
      if (!wanted) continue;
      const size_t step =
          std::min(static_cast<size_t>(s.firstPosition + row + 1), m_next.size() - 1);
      if (m_samples && batch.sample) {
        out.tokens.push_back(m_next[step]);
        continue;
      }
      const size_t at = out.logits.size();
      out.logits.resize(at + static_cast<size_t>(m_vocab), 0.0f);
      out.logits[at + static_cast<size_t>(m_next[step])] = 10.0f;
    }
  }

 private:
  runtime::StageSpec m_spec;
  int32_t m_vocab;
  std::vector<int32_t> m_next;
  int32_t m_cached = 0;
  std::vector<Call> m_calls;
  std::optional<int32_t> m_failAt;
  bool m_samples = false;
};

}  // namespace shoal::test
