#pragma once
// End-to-end accuracy of a backend against the CPU backend, the contract every GPU backend is
// held to: over teacher-forced positions (both backends see the same tokens, so one early
// difference cannot snowball), the top-1 tokens agree at >= 99% of positions and the mean
// Kullback-Leibler divergence KL(p_cpu || p_backend) of the next-token distributions is
// <= 0.01 nats. Greedy sequences themselves are not compared: reordered f16/fp32 arithmetic
// legitimately flips a near-tie now and then, and after the flip the texts differ for good.

#include <cstddef>
#include <span>

namespace shoal::gpu_test {

class LogitAgreement {
 public:
  static constexpr double kMinTop1 = 0.99;
  static constexpr double kMaxMeanKl = 0.01;  // nats

  // One position: the reference (CPU) logits and the backend's, the same vocabulary size.
  void add(std::span<const float> reference, std::span<const float> candidate);

  size_t positions() const { return m_positions; }
  double top1Agreement() const;  // fraction of positions with the same argmax (1 when none)
  double meanKl() const;         // nats; 0 when no positions
  double maxKl() const { return m_klMax; }
  bool meetsContract() const { return top1Agreement() >= kMinTop1 && meanKl() <= kMaxMeanKl; }

 private:
  size_t m_positions = 0;
  size_t m_top1Equal = 0;
  double m_klSum = 0;
  double m_klMax = 0;
};

}  // namespace shoal::gpu_test
