#pragma once
// A Stage for tests: holds no weights; its logits make a scripted token the argmax at each step,
// so session behaviour (stop strings, end of generation, limits, streaming) can be tested
// without a model's numerics. It records every forward() call.

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "engine/runtime/stage.h"

namespace shoal::test {

class ScriptedStage final : public runtime::Stage {
 public:
  struct Call {
    int32_t firstPosition;
    int32_t count;
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

  void forward(const runtime::StageInput& in, runtime::StageOutput& out) override {
    if (in.firstPosition > m_cached) throw std::logic_error("gap in positions");
    m_calls.push_back({in.firstPosition, in.count});
    m_cached = in.firstPosition + in.count;
    out.logits.assign(static_cast<size_t>(m_vocab), 0.0f);
    const size_t step = std::min(static_cast<size_t>(m_cached), m_next.size() - 1);
    out.logits[static_cast<size_t>(m_next[step])] = 10.0f;
  }

  void truncate(int32_t, int32_t fromPosition) override {
    m_cached = std::min(m_cached, fromPosition);
  }
  int32_t cachedPositions(int32_t) const override { return m_cached; }

  const std::vector<Call>& calls() const { return m_calls; }

 private:
  runtime::StageSpec m_spec;
  int32_t m_vocab;
  std::vector<int32_t> m_next;
  int32_t m_cached = 0;
  std::vector<Call> m_calls;
};

}  // namespace shoal::test
