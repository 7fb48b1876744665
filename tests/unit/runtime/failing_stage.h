#pragma once
// A stage that passes everything to the one it wraps, except that its n-th submit() throws
// (once), as a pool node that dies would; and, when asked, its next truncate().

#include <memory>
#include <stdexcept>

#include "engine/runtime/stage.h"

namespace shoal::test {

class FailingStage final : public runtime::Stage {
 public:
  FailingStage(std::unique_ptr<runtime::Stage> inner, int failAtSubmit)
      : m_inner(std::move(inner)), m_failAt(failAtSubmit) {}
  const runtime::StageSpec& spec() const override { return m_inner->spec(); }
  Ticket submit(const runtime::Batch& batch, runtime::StageOutput& output) override {
    if (++m_submits == m_failAt) throw std::runtime_error("stage lost");
    return m_inner->submit(batch, output);
  }
  void wait(Ticket ticket) override { m_inner->wait(ticket); }
  int32_t truncate(int32_t sequence, int32_t fromPosition) override {
    if (m_failNextTruncate) {
      m_failNextTruncate = false;
      throw std::runtime_error("stage lost");
    }
    return m_inner->truncate(sequence, fromPosition);
  }
  void failNextTruncate() { m_failNextTruncate = true; }
  int32_t cachedPositions(int32_t sequence) const override {
    return m_inner->cachedPositions(sequence);
  }
  bool failed() const { return m_submits >= m_failAt; }

 private:
  std::unique_ptr<runtime::Stage> m_inner;
  int m_failAt;
  int m_submits = 0;
  bool m_failNextTruncate = false;
};

}  // namespace shoal::test
