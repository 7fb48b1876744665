#include "engine/runtime/draft_policy.h"

#include <algorithm>

namespace shoal::runtime {
namespace {

constexpr double kDecay = 0.9;           // weight of the past in each average
constexpr double kUnmeasuredRow = 0.25;  // a row's cost, in plain steps, until measured
constexpr int32_t kProbeEvery = 32;      // plain steps before trying a draft again
constexpr int32_t kMostWait = 1024;      // the longest wait after fruitless probes

}  // namespace

double DraftPolicy::acceptance() const { return m_accepted / (m_accepted + m_rejected); }

int32_t DraftPolicy::length(int32_t available) {
  if (available <= 0) return 0;
  if (m_plain <= 0) return 0;  // a plain step first, to measure what drafts are weighed against
  const double a = acceptance();
  const double row = m_row >= 0 ? m_row : kUnmeasuredRow * m_plain;
  // Expected tokens per second of d drafts, against a plain step's 1 / plain.
  double best = 1.0 / m_plain, yield = 1.0, term = 1.0;
  int32_t bestD = 0;
  for (int32_t d = 1; d <= available; ++d) {
    term *= a;
    yield += term;
    const double rate = yield / (m_plain + d * row);
    if (rate > best) {
      best = rate;
      bestD = d;
    }
  }
  m_probing = false;
  if (bestD == 0 && ++m_sinceDraft >= m_probeEvery) {
    bestD = m_probeLength > 0 ? std::min(available, m_probeLength) : available;
    m_probing = true;
  }
  if (bestD > 0) m_sinceDraft = 0;
  return bestD;
}

void DraftPolicy::plainStep(double seconds) {
  m_plain = m_plain <= 0 ? seconds : kDecay * m_plain + (1 - kDecay) * seconds;
}

void DraftPolicy::verifyStep(int32_t drafted, int32_t accepted, double seconds) {
  // A draft model's probe that confirmed nothing waits twice as long for the next one (a draft
  // model that never agrees with the model then costs almost nothing); one that confirmed a
  // draft resets the wait. Prompt-lookup probes cost next to nothing: they keep their pace.
  if (m_probing && m_probeLength > 0) {
    m_probeEvery = accepted > 0 ? kProbeEvery : std::min(2 * m_probeEvery, kMostWait);
  }
  m_probing = false;
  m_accepted = kDecay * m_accepted + accepted;
  m_rejected = kDecay * m_rejected + (accepted < drafted ? 1 : 0);
  if (m_plain <= 0 || drafted <= 0) return;
  const double row = std::max(0.0, (seconds - m_plain) / drafted);
  m_row = m_row < 0 ? row : kDecay * m_row + (1 - kDecay) * row;
}

}  // namespace shoal::runtime
