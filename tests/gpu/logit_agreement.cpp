#include "tests/gpu/logit_agreement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace shoal::gpu_test {
namespace {

// log-softmax in double: log p_i = x_i - max - log(sum exp(x_j - max)).
std::vector<double> logSoftmax(std::span<const float> x) {
  const double top = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - top);
  const double logSum = std::log(sum);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]) - top - logSum;
  return out;
}

}  // namespace

void LogitAgreement::add(std::span<const float> reference, std::span<const float> candidate) {
  ++m_positions;
  if (reference.empty() || reference.size() != candidate.size()) {
    // A missing or misshapen row is a disagreement of unbounded size.
    m_klSum = m_klMax = std::numeric_limits<double>::infinity();
    return;
  }
  const auto refTop = std::max_element(reference.begin(), reference.end()) - reference.begin();
  const auto gotTop = std::max_element(candidate.begin(), candidate.end()) - candidate.begin();
  // The reference's top-2 margin: its best logit minus the best of the others.
  float second = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < reference.size(); ++i) {
    if (static_cast<std::ptrdiff_t>(i) != refTop) second = std::max(second, reference[i]);
  }
  const double margin = static_cast<double>(reference[static_cast<size_t>(refTop)]) - second;
  const bool decisive = margin >= kDecisiveMargin;
  m_decisive += decisive ? 1 : 0;
  if (refTop == gotTop) {
    ++m_top1Equal;
    m_decisiveEqual += decisive ? 1 : 0;
  } else {
    m_missMarginMax = std::max(m_missMarginMax, margin);
  }
  const std::vector<double> p = logSoftmax(reference);
  const std::vector<double> q = logSoftmax(candidate);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
  if (!std::isfinite(kl)) kl = std::numeric_limits<double>::infinity();
  kl = std::max(kl, 0.0);  // rounding can leave a tiny negative for identical rows
  m_klSum += kl;
  m_klMax = std::max(m_klMax, kl);
}

double LogitAgreement::top1Agreement() const {
  return m_positions == 0 ? 1.0
                          : static_cast<double>(m_top1Equal) / static_cast<double>(m_positions);
}

double LogitAgreement::decisiveTop1Agreement() const {
  return m_decisive == 0 ? 1.0
                         : static_cast<double>(m_decisiveEqual) / static_cast<double>(m_decisive);
}

double LogitAgreement::meanKl() const {
  return m_positions == 0 ? 0.0 : m_klSum / static_cast<double>(m_positions);
}

}  // namespace shoal::gpu_test
