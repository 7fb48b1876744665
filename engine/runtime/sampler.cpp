// The sampling chain of sampler.h. Candidates are (logit, id) pairs; wherever an order matters
// it is "higher logit first, lower id on ties", a strict total order, so the result of a sort
// is the same in every standard library and the draw walks the same sequence everywhere.

#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>

#include "engine/error.h"

namespace shoal::runtime {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool higherFirst(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

Sampler::Sampler(SamplerParams params) : m_params(params), m_rng(params.seed) {
  if (std::isnan(params.temperature) || std::isnan(params.topP) || std::isnan(params.minP)) {
    throw Error("sampler: temperature " + std::to_string(params.temperature) + ", topP " +
                std::to_string(params.topP) + ", minP " + std::to_string(params.minP) +
                ": NaN is not a setting");
  }
  if (!(params.repeatPenalty > 0.0f)) {
    throw Error("sampler: repeatPenalty " + std::to_string(params.repeatPenalty) +
                " must be > 0 (1 is off)");
  }
  if (params.repeatLastN < 0) {
    throw Error("sampler: repeatLastN " + std::to_string(params.repeatLastN) +
                " must be >= 0 (0 is off)");
  }
  m_recent.reserve(static_cast<size_t>(params.repeatLastN));
  m_penalized.reserve(static_cast<size_t>(params.repeatLastN));
}

double Sampler::nextUniform() {
  // 53 random bits fill a double's mantissa exactly: uniform on [0, 1) with step 2^-53.
  return static_cast<double>(m_rng() >> 11) * 0x1.0p-53;
}

void Sampler::accept(int32_t token) {
  if (token < 0) throw Error("sampler: accepted token id " + std::to_string(token) + " < 0");
  const size_t capacity = static_cast<size_t>(m_params.repeatLastN);
  if (capacity == 0) return;
  if (m_recent.size() < capacity) {
    m_recent.push_back(token);
    return;
  }
  m_recent[m_recentNext] = token;
  m_recentNext = (m_recentNext + 1) % capacity;
}

void Sampler::reset() {
  m_recent.clear();
  m_recentNext = 0;
  m_rng.seed(m_params.seed);
}

int32_t Sampler::sample(std::span<const float> logits) {
  size_t count = 0;
  double total = 0;
  const int32_t decided = prepare(logits, count, total);
  if (decided >= 0) return decided;
  return draw(nextUniform() * total, count, -1);
}

int32_t Sampler::sampleDraft(std::span<const float> logits, int32_t draft, bool& accepted) {
  size_t count = 0;
  double total = 0;
  const int32_t decided = prepare(logits, count, total);
  if (decided >= 0) {  // a point mass: the draft is accepted exactly when it is that token
    accepted = decided == draft;
    return decided;
  }
  double draftWeight = 0;
  for (size_t i = 0; i < count; ++i) {
    if (m_candidates[i].second == draft) draftWeight = m_weights[i];
  }
  accepted = nextUniform() * total < draftWeight;
  if (accepted) return draft;
  // The rest of the distribution, renormalized: every other token keeps its share.
  return draw(nextUniform() * (total - draftWeight), count, draft);
}

int32_t Sampler::draw(double r, size_t count, int32_t skip) const {
  double cumulative = 0.0;
  size_t lastPositive = count;
  for (size_t i = 0; i < count; ++i) {
    if (m_weights[i] <= 0.0 || m_candidates[i].second == skip) continue;
    lastPositive = i;
    cumulative += m_weights[i];
    if (r < cumulative) return m_candidates[i].second;
  }
  // Rounding left r at or past the summed mass: the last id that has any probability.
  return m_candidates[lastPositive < count ? lastPositive : 0].second;
}

int32_t Sampler::prepare(std::span<const float> logits, size_t& countOut, double& totalOut) {
  if (logits.empty()) throw Error("sampler: empty logits row");
  if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw Error("sampler: logits row of " + std::to_string(logits.size()) +
                " entries exceeds the int32 token id range");
  }
  const size_t n = logits.size();
  if (m_candidates.capacity() < n) {
    m_candidates.reserve(n);
    m_weights.reserve(n);
  }

  // Candidates in id order. NaN becomes -inf and +inf the largest float, so every comparison
  // below is well defined and exp(l - max) never sees inf - inf.
  m_candidates.resize(n);
  bool anyFinite = false;
  for (size_t i = 0; i < n; ++i) {
    float v = logits[i];
    if (std::isnan(v)) v = kNegInf;
    if (v == std::numeric_limits<float>::infinity()) v = std::numeric_limits<float>::max();
    anyFinite = anyFinite || v != kNegInf;
    m_candidates[i] = {v, static_cast<int32_t>(i)};
  }
  if (!anyFinite) return 0;

  // Repetition penalty, once per distinct recent id (as llama.cpp's penalty_repeat: a token
  // seen five times is penalised once, like a token seen once).
  if (m_params.repeatPenalty != 1.0f && !m_recent.empty()) {
    m_penalized.assign(m_recent.begin(), m_recent.end());  // within the reserved capacity
    std::sort(m_penalized.begin(), m_penalized.end());
    m_penalized.erase(std::unique(m_penalized.begin(), m_penalized.end()), m_penalized.end());
    for (int32_t id : m_penalized) {
      if (static_cast<size_t>(id) >= n) continue;
      float& logit = m_candidates[static_cast<size_t>(id)].first;
      logit = logit > 0.0f ? logit / m_params.repeatPenalty : logit * m_params.repeatPenalty;
    }
  }

  if (!(m_params.temperature > 0.0f)) {
    // Greedy: the first strictly larger logit wins, so ties keep the lowest id.
    size_t best = 0;
    for (size_t i = 1; i < n; ++i) {
      if (m_candidates[i].first > m_candidates[best].first) best = i;
    }
    return m_candidates[best].second;
  }

  size_t count = n;
  bool sorted = false;
  if (m_params.topK > 0 && static_cast<size_t>(m_params.topK) < n) {
    count = static_cast<size_t>(m_params.topK);
    std::partial_sort(m_candidates.begin(), m_candidates.begin() + static_cast<ptrdiff_t>(count),
                      m_candidates.end(), higherFirst);
    sorted = true;
  }
  const bool topPOn = m_params.topP < 1.0f;
  if (topPOn && !sorted) {
    // top-p needs the whole order (its cut is a prefix of it).
    std::sort(m_candidates.begin(), m_candidates.end(), higherFirst);
    sorted = true;
  }

  float maxLogit = m_candidates[0].first;
  if (!sorted) {
    for (size_t i = 1; i < count; ++i) maxLogit = std::max(maxLogit, m_candidates[i].first);
  }

  // Softmax at temperature 1, relative to the largest: weight 1 for the most likely id, so
  // min-p's test p_i >= minP * p_max reads weight >= minP, and nothing overflows.
  m_weights.resize(count);
  double total = 0.0;
  for (size_t i = 0; i < count; ++i) {
    m_weights[i] = std::exp(static_cast<double>(m_candidates[i].first) - maxLogit);
    total += m_weights[i];
  }

  if (topPOn) {
    // Smallest prefix of the sorted candidates whose mass reaches topP of the total.
    const double target = static_cast<double>(m_params.topP) * total;
    double mass = 0.0;
    size_t keep = count;
    for (size_t i = 0; i < count; ++i) {
      mass += m_weights[i];
      if (mass >= target) {
        keep = i + 1;
        break;
      }
    }
    count = keep;
  }

  if (m_params.minP > 0.0f) {
    // In-order compaction (no std::partition: its order differs between libraries, and the
    // draw below depends on the order). The largest has weight 1, so at least one survives
    // unless minP > 1; then the largest alone is kept.
    size_t kept = 0;
    for (size_t i = 0; i < count; ++i) {
      if (m_weights[i] >= static_cast<double>(m_params.minP)) {
        m_candidates[kept] = m_candidates[i];
        m_weights[kept] = m_weights[i];
        ++kept;
      }
    }
    if (kept == 0) {
      size_t best = 0;
      for (size_t i = 1; i < count; ++i) {
        if (higherFirst(m_candidates[i], m_candidates[best])) best = i;
      }
      m_candidates[0] = m_candidates[best];
      kept = 1;
    }
    count = kept;
  }

  if (count == 1) return m_candidates[0].second;

  // Temperature reshapes what is left; recomputed from the logits rather than powering the
  // weights so that a small temperature cannot underflow everything at once.
  total = 0.0;
  const double invTemperature = 1.0 / static_cast<double>(m_params.temperature);
  for (size_t i = 0; i < count; ++i) {
    m_weights[i] =
        std::exp((static_cast<double>(m_candidates[i].first) - maxLogit) * invTemperature);
    total += m_weights[i];
  }

  countOut = count;
  totalOut = total;
  return -1;
}

}  // namespace shoal::runtime
