#pragma once
// Picks the next token from a row of logits. Deterministic for a given seed. The random numbers
// are the same on every machine: std::mt19937_64 (whose output the standard fixes) turned into
// doubles by the sampler itself, not by a standard distribution (those differ between standard
// libraries), and candidate order is a strict total order. The chosen token can still differ
// between machines where the math library rounds exp() differently at a boundary.
// Order of the chain (same as llama.cpp's common default order for the ones both have):
// repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw. temperature <= 0 is greedy
// (argmax after the penalty; ties go to the lowest id). top-p and min-p therefore judge the
// distribution at temperature 1.

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace shoal::runtime {

struct SamplerParams {
  float temperature = 0.8f;    // <= 0: greedy
  int32_t topK = 40;           // <= 0: off
  float topP = 0.95f;          // >= 1: off; keeps the smallest most-likely set whose mass >= topP
  float minP = 0.05f;          // <= 0: off; drops ids whose probability < minP * the largest
  float repeatPenalty = 1.0f;  // 1: off; divides positive logits, multiplies negative ones; > 0
  int32_t repeatLastN = 64;    // how many recent tokens the penalty looks at; >= 0
  uint64_t seed = 0;           // same seed, same output
  bool operator==(const SamplerParams&) const = default;
};

// Whether a generation draws by position: the token at position P with a sampler re-seeded to
// params.seed + P (Sampler::reseed, SampleRequest::seed), so that the token is the same wherever
// it is drawn (here, on a pool's last node, on a GPU stage, decoded ahead) and however the steps
// fell. Not with a repetition penalty, which needs the history only the generation has.
inline bool drawsByPosition(const SamplerParams& p) { return p.repeatPenalty == 1.0f; }

class Sampler {
 public:
  // Throws shoal::Error for parameters that have no meaning (repeatPenalty <= 0 or NaN,
  // repeatLastN < 0, NaN temperature/topP/minP).
  explicit Sampler(SamplerParams params);

  // The id of the next token. logits must not be empty (shoal::Error). NaN logits count as
  // -infinity; when every logit is -infinity the lowest id is returned. Allocates only on the
  // first call (or when the vocabulary grows): scratch buffers are kept between calls.
  int32_t sample(std::span<const float> logits);
  // Speculative decoding's rejection rule for a token drafted with certainty (prompt lookup):
  // the draft is accepted with the probability p(draft) this sampler's chain gives it; otherwise
  // the token is drawn from p without the draft, renormalized. Over the draws that is exactly p
  // (the draft comes out with probability p(draft), any other token t with
  // (1 - p(draft)) * p(t) / (1 - p(draft))), so speculation leaves the reply's distribution
  // unchanged; it uses the random numbers differently, so a seeded reply is another sample of
  // it. Greedy: the argmax, accepted when it is the draft. Sets `accepted`.
  int32_t sampleDraft(std::span<const float> logits, int32_t draft, bool& accepted);
  // Tell the sampler a token was accepted (prompt or generated) for the repetition penalty.
  // Negative ids are refused (shoal::Error); ids beyond a later call's vocabulary are ignored.
  void accept(int32_t token);
  void reset();  // forget history and re-seed
  // Re-seeds the draws only (the history stays): the next draw is the one a new Sampler with
  // this seed would make. Position-seeded sampling (drawsByPosition) calls it before each draw.
  void reseed(uint64_t seed) { m_rng.seed(seed); }

  const SamplerParams& params() const { return m_params; }

 private:
  // Uniform double in [0, 1) from the top 53 bits of one mt19937_64 output.
  double nextUniform();
  // The chain up to the draw: returns the token when it is decided without one (greedy, a
  // single candidate left, no finite logit), else -1 with m_candidates[0..count) and their
  // m_weights (summing to total) ready to draw from.
  int32_t prepare(std::span<const float> logits, size_t& count, double& total);
  // The candidate where the cumulative weight passes r, `skip` left out (-1: none).
  int32_t draw(double r, size_t count, int32_t skip) const;

  SamplerParams m_params;
  std::mt19937_64 m_rng;
  // The last repeatLastN accepted tokens as a ring: m_recent[m_recentNext] is overwritten next
  // once the ring is full. A ring so that accept() never allocates after construction.
  std::vector<int32_t> m_recent;
  size_t m_recentNext = 0;
  std::vector<std::pair<float, int32_t>> m_candidates;  // scratch, reused across calls
  std::vector<int32_t> m_penalized;                     // scratch: distinct recent ids
  std::vector<double> m_weights;                        // scratch: unnormalised probabilities
};

}  // namespace shoal::runtime
