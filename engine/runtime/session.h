#pragma once
// Drives a chain of stages to generate text: prefill, decode loop, streaming callback (whole
// UTF-8 characters only), stop strings, cancellation, and the context-limit policy.
//
// The session remembers which tokens its KV cache holds, so a follow-up prompt that extends the
// previous one (the next chat turn) only computes the new tokens.
//
// Context policy: generation never overruns the context. A prompt that does not fit is refused
// (shoal::Error, nothing computed); a reply that reaches the end of the context stops with
// FinishReason::ContextFull. Callers that want to keep chatting drop old turns and re-prompt
// (the chat front-ends do).

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/sampler.h"

namespace shoal::runtime {

enum class FinishReason { Length, EndOfGeneration, StopString, ContextFull, Cancelled };
std::string_view finishReasonName(FinishReason reason);  // "length", "eog", "stop", ...

struct GenerateOptions {
  int32_t maxTokens = 256;                    // most new tokens
  SamplerParams sampler;                      // temperature <= 0: greedy
  std::vector<std::string> stop;              // stop strings; the text ends before the first match
  bool ignoreEndOfGeneration = false;         // keep going past EOS/EOT (benchmarks, fixtures)
  const std::atomic<bool>* cancel = nullptr;  // checked before every token
};

struct GenerateResult {
  std::string text;                    // the reply, stop string excluded
  std::vector<model::TokenId> tokens;  // generated token ids (including a final EOG token)
  FinishReason finish = FinishReason::Length;
  int32_t promptTokens = 0;   // tokens of the prompt
  int32_t reusedTokens = 0;   // prompt tokens whose KV cache was reused
  double prefillSeconds = 0;  // computing the new prompt tokens
  double decodeSeconds = 0;   // generating (after the first token)
};

class Session {
 public:
  // onText receives the reply as it is produced, whole UTF-8 characters only, with stop strings
  // held back until they can no longer match; return false from it to stop (Cancelled).
  using TextCallback = std::function<bool(std::string_view piece)>;

  Session(Chain& chain, const model::Tokenizer& tokenizer, int32_t sequence = 0);

  GenerateResult generate(const std::vector<model::TokenId>& prompt, const GenerateOptions& options,
                          const TextCallback& onText = {});

  // Forget the cache (e.g. /reset).
  void reset();

  int32_t contextLength() const { return m_chain.contextLength(); }
  // Tokens the KV cache holds now (prompt + reply of the last call).
  const std::vector<model::TokenId>& cachedTokens() const { return m_cached; }

 private:
  Chain& m_chain;
  const model::Tokenizer& m_tokenizer;
  int32_t m_sequence;
  std::vector<model::TokenId> m_cached;
  std::vector<float> m_logits;
};

}  // namespace shoal::runtime
