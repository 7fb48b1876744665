#pragma once
// The one generation loop. Drives a chain of stages — local, remote (a pool) or both — to
// generate text: prefill, decode loop, streaming callback (whole UTF-8 characters only, stop
// strings: engine/runtime/reply_text.h), cancellation, the context-limit policy, and recovery
// after a failed stage. The CLI, the API, the desktop app and the pool coordinator all use it.
//
// Sampling happens on the head stage when it can (a remote head samples on its node, so logits
// never cross the network; it does not apply the repetition penalty) and here otherwise.
//
// Recovery: when a stage throws during generation and a Recovery hook is set, the hook repairs
// the chain (e.g. the coordinator re-plans without the failed node and replaces the stages,
// whose caches start empty); the session then replays the prompt and the reply so far in the
// same micro-batches as the first time, so a greedy reply continues unchanged.
//
// The session remembers which tokens its KV cache holds, so a follow-up prompt that extends the
// previous one (the next chat turn) only computes the new tokens.
//
// Context policy: generation never overruns the context. A prompt that does not fit is refused
// (shoal::Error, nothing computed); a reply that reaches the end of the context stops with
// FinishReason::ContextFull. Callers that want to keep chatting drop old turns and re-prompt
// (the chat front-ends do).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/draft_policy.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/prompt_lookup.h"
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
  // Speculative decoding by prompt lookup (requests without a repetition penalty; maxDraft 0:
  // off). Drafted tokens are verified in one pass through the chain in decode order
  // (Segment::decodeOrder), so a greedy reply is the one plain decoding gives, token for token,
  // and a sampled one keeps its distribution (Sampler::sampleDraft's rejection rule; a seed then
  // gives another sample than without drafts); how many are verified per pass is the session's
  // DraftPolicy's choice (none where none pays).
  PromptLookupParams lookup{.maxDraft = 0};
  // Decoding ahead on a chain that can (one stage holding the whole model on a pool node,
  // Chain::decodeAheadLimit): where no draft is verified, a step asks the node for up to this
  // many tokens at once, so a reply pays one network round trip per that many tokens rather than
  // per token. The output is the same (each token is still decoded alone, sampled with the
  // seed of its position: drawsByPosition); what changes is that text arrives in bursts (at
  // most about kDecodeAheadBurstSeconds of decoding each) and a stop is noticed up to a burst late
  // (the extra tokens are computed and dropped). Requests with a repetition penalty never decode
  // ahead (the node has no token history). 0 or 1: off.
  int32_t decodeAhead = 32;
};

// How long one burst of decoding ahead may take (Session sizes the bursts from the time per
// token it measured): long enough to hide a Wi-Fi round trip many times over, short enough
// that text still streams.
inline constexpr double kDecodeAheadBurstSeconds = 0.25;

// The size of a reply's next burst (before the caller's limits: tokens wanted, context, the
// chain's and the request's most): 2 for the first (`previous` <= 1), then twice the last, up
// to about kDecodeAheadBurstSeconds at `secondsPerToken` (0: not measured yet), never below 2.
// Session and Scheduler size their bursts alike with it.
inline int32_t nextDecodeAheadBurst(int32_t previous, double secondsPerToken) {
  const int32_t byTime =
      secondsPerToken > 0 ? static_cast<int32_t>(kDecodeAheadBurstSeconds / secondsPerToken) : 2;
  const int32_t grown = previous > 1 ? 2 * previous : 2;
  return std::max(2, std::min(byTime, grown));
}

// A burst of `burst` tokens fitted to the `left` tokens the reply may still take and the `most`
// one call may decode. It takes one more rather than leave a single token behind, which would
// cost a step (a round trip) of its own.
inline int32_t fitDecodeAheadBurst(int32_t burst, int32_t left, int32_t most) {
  int32_t n = std::min({burst, left, most});
  if (left - n == 1 && n + 1 <= most) ++n;
  return n;
}

struct GenerateResult {
  std::string text;                    // the reply, stop string excluded
  std::vector<model::TokenId> tokens;  // generated token ids (including a final EOG token)
  FinishReason finish = FinishReason::Length;
  int32_t promptTokens = 0;   // tokens of the prompt
  int32_t reusedTokens = 0;   // prompt tokens whose KV cache was reused
  double prefillSeconds = 0;  // computing the new prompt tokens
  double decodeSeconds = 0;   // generating (after the first token)
  int32_t recoveries = 0;     // times the chain was repaired during this reply
  // Speculative decoding: tokens drafted, drafts that the model confirmed (each saved a pass
  // through the chain), and passes that verified a draft; the part of each that came from a
  // draft model (Session::setDrafter).
  int32_t draftedTokens = 0;
  int32_t acceptedTokens = 0;
  int32_t verifySteps = 0;
  int32_t modelDraftedTokens = 0;
  int32_t modelAcceptedTokens = 0;
  // Decoding ahead (GenerateOptions::decodeAhead): steps that asked the chain for several
  // tokens, and the tokens they brought.
  int32_t aheadSteps = 0;
  int32_t aheadTokens = 0;
};

class Session {
 public:
  // onText receives the reply as it is produced, whole UTF-8 characters only, with stop strings
  // held back until they can no longer match; return false from it to stop (Cancelled).
  using TextCallback = std::function<bool(std::string_view piece)>;

  // Called with an error thrown while a step was computed and the index of the stage that threw
  // last (Chain::failedStage) — any error, so the hook recovers only from the ones it knows
  // (the coordinator: transport errors). Return true once the chain is repaired and every
  // stage's cache of this sequence is empty; false (or a throw) ends generate() with the error,
  // and the session then forgets the failed step (its next generate() reuses only what the
  // stages hold).
  using Recovery = std::function<bool(const std::exception& error, size_t failedStage)>;

  Session(Chain& chain, const model::Tokenizer& tokenizer, int32_t sequence = 0,
          Recovery recovery = {});

  GenerateResult generate(const std::vector<model::TokenId>& prompt, const GenerateOptions& options,
                          const TextCallback& onText = {});

  // Forget the cache (e.g. /reset).
  void reset();

  // A draft model (ModelDrafter) for speculative decoding, or nullptr (the default): where
  // prompt lookup offers no draft, requests with lookup.maxDraft > 0 let the draft model
  // propose up to maxDraft tokens, as many as its own DraftPolicy finds worth their cost. Not
  // owned; it must outlive its use by this session.
  void setDrafter(ModelDrafter* drafter) { m_drafter = drafter; }

  int32_t contextLength() const { return m_chain.contextLength(); }
  // Tokens the KV cache holds now (prompt + reply of the last call).
  const std::vector<model::TokenId>& cachedTokens() const { return m_cached; }

 private:
  // How a step runs tokens[from..) of m_cached: the prompt (micro-batches of it) or one
  // reply token, predicting the token after the last; or a reply token followed by drafted
  // ones, in decode order, predicting the token after each (verification); or one reply token
  // from which the chain decodes m_aheadCount tokens on its own (Chain::decodeAhead).
  enum class StepKind { Plain, Verify, Ahead };
  // Runs one step, recovering (and replaying) when a stage fails, and returns the predicted
  // tokens (sampled on the head stage or here): one for Plain, one per row for Verify (a
  // sampled verification stops at its first rejected draft), m_aheadCount for Ahead.
  const std::vector<model::TokenId>& step(size_t from, StepKind kind, Sampler& sampler,
                                          const GenerateOptions& options, GenerateResult& result);
  // Recomputes m_cached from position 0 after a recovery, step by step as first computed.
  void replay();
  void compute(size_t from, StepKind kind, Sampler& sampler, const GenerateOptions& options);
  // The next reply tokens after m_cached (whose last token is the last one emitted): one from a
  // plain step, or the confirmed part of a draft plus the model's own next token. m_cached then
  // holds every token whose cache entry is kept.
  void produce(int32_t room, Sampler& sampler, const GenerateOptions& options,
               GenerateResult& result, std::vector<model::TokenId>& tokens);

  struct Step {
    size_t start = 0;          // where the step began in m_cached
    bool decodeOrder = false;  // its rows were computed as if decoded alone
  };

  Chain& m_chain;
  const model::Tokenizer& m_tokenizer;
  int32_t m_sequence;
  Recovery m_recovery;
  std::vector<model::TokenId> m_cached;
  // The steps computed by the chain, in order (so a replay repeats them); each ends where the
  // next begins, the last at the end of m_cached.
  std::vector<Step> m_steps;
  StageOutput m_out;
  std::vector<model::TokenId> m_predicted;  // step()'s result
  std::vector<model::TokenId> m_draft;      // scratch: the drafted tokens
  DraftPolicy m_draftPolicy;                // prompt-lookup drafts; learns across replies
  ModelDrafter* m_drafter = nullptr;        // the draft model, if any
  DraftPolicy m_modelPolicy{1};             // the draft model's (they cost time to make)
  int32_t m_aheadCount = 0;                 // tokens the next Ahead step asks for
  double m_secondsPerToken = 0;  // measured decode time per token (sizes the Ahead bursts)
};

}  // namespace shoal::runtime
