#pragma once
// How many drafted tokens a decoding step should verify, decided from what verification has
// cost and earned so far. A verifying pass of d drafts yields 1 + (the confirmed drafts) tokens
// and costs about plain + d * row seconds: cheap rows where a step is dominated by a round trip
// through the pool or by reading weights, expensive ones where attention over a long context
// is (each row attends on its own). With a per-token acceptance rate a, the expected yield is
// 1 + a + ... + a^d, so the policy picks the d with the best yield per second, 0 (a plain step)
// when no draft pays. It learns a, plain and row as it goes (decaying averages), and tries a
// draft again now and then after choosing plain steps (every 32; for a draft model's drafts,
// twice as many after each probe that confirmed nothing), so that a change of text is noticed.
// The output never depends on it (speculation is verified): only the speed does.

#include <cstdint>

namespace shoal::runtime {

class DraftPolicy {
 public:
  // probeLength: how many drafted tokens a probe after a run of plain steps verifies (0: all
  // available). Prompt-lookup drafts are free to make, so a probe takes them all; a draft
  // model's cost time, so its probes take one.
  explicit DraftPolicy(int32_t probeLength = 0) : m_probeLength(probeLength) {}

  // How many of `available` drafted tokens (available <= the caller's most) to verify now.
  int32_t length(int32_t available);
  // A plain step (one token) took `seconds`.
  void plainStep(double seconds);
  // A verifying step of `drafted` tokens, `accepted` of them confirmed, took `seconds`.
  void verifyStep(int32_t drafted, int32_t accepted, double seconds);

  double acceptance() const;  // the per-token acceptance estimate

 private:
  double m_plain = 0;        // seconds of a plain step (0: not measured yet)
  double m_row = -1;         // extra seconds per drafted row (< 0: not measured yet)
  double m_accepted = 1;     // decayed count of confirmed drafts (prior: 1 of 2)
  double m_rejected = 1;     // decayed count of verifications that stopped at a rejected draft
  int32_t m_sinceDraft = 0;  // plain steps taken since the last draft although one was offered
  int32_t m_probeLength = 0;
  int32_t m_probeEvery = 32;  // plain steps between probes (probeLength > 0: doubles after
                              // fruitless ones)
  bool m_probing = false;     // the last length() was a probe
};

}  // namespace shoal::runtime
