#include "engine/runtime/session.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"
#include "engine/runtime/decode_ahead.h"
#include "engine/runtime/reply_text.h"

namespace shoal::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::string_view finishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::Length:
      return "length";
    case FinishReason::EndOfGeneration:
      return "eog";
    case FinishReason::StopString:
      return "stop";
    case FinishReason::ContextFull:
      return "context_full";
    case FinishReason::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

Session::Session(Chain& chain, const model::Tokenizer& tokenizer, int32_t sequence,
                 Recovery recovery)
    : m_chain(chain),
      m_tokenizer(tokenizer),
      m_sequence(sequence),
      m_recovery(std::move(recovery)) {}

void Session::reset() {
  m_chain.truncate(m_sequence, 0);
  m_cached.clear();
  m_steps.clear();
}

void Session::compute(size_t from, StepKind kind, Sampler& sampler,
                      const GenerateOptions& options) {
  const std::span<const model::TokenId> tokens(m_cached.data() + from, m_cached.size() - from);
  const bool verify = kind == StepKind::Verify;
  // The seed follows the position sampled (drawsByPosition), so a replay draws the same numbers.
  const SampleRequest sample = sampleRequestAt(options.sampler, m_cached.size());
  // A head stage that samples (on its device, or a pool's last node) has no token history, so a
  // repetition penalty needs the logits here.
  // Verifying a sampled reply's drafts takes the rows' logits here (the rejection rule).
  const bool sampledVerify = verify && options.sampler.temperature > 0;
  const bool headMaySample = options.sampler.repeatPenalty == 1.0f && !sampledVerify;
  // A chain repaired during the step may no longer decode ahead (a node lost, the model now
  // over two): the step then yields one token, as a plain one.
  if (kind == StepKind::Ahead && m_chain.decodeAheadLimit() >= m_aheadCount) {
    // produce() asks for it only where the head samples (no repetition penalty).
    m_predicted = m_chain.decodeAhead(m_sequence, static_cast<int32_t>(from), m_cached[from],
                                      m_aheadCount, sample);
    if (m_predicted.size() != static_cast<size_t>(m_aheadCount)) {
      throw Error("the chain decoded " + std::to_string(m_predicted.size()) +
                  " tokens ahead, not " + std::to_string(m_aheadCount));
    }
    for (model::TokenId t : m_predicted) {
      if (t < 0 || t >= m_tokenizer.size()) throw Error("the head stage sampled an unknown token");
    }
    return;
  }
  m_chain.forward(m_sequence, static_cast<int32_t>(from), tokens, m_out,
                  verify ? LogitRows::All : LogitRows::Last, headMaySample ? &sample : nullptr,
                  verify);
  const size_t rows = verify ? tokens.size() : 1;
  m_predicted.clear();
  if (!m_out.tokens.empty()) {
    if (m_out.tokens.size() != rows) throw Error("the head stage sampled the wrong number of rows");
    for (model::TokenId t : m_out.tokens) {
      if (t < 0 || t >= m_tokenizer.size()) throw Error("the head stage sampled an unknown token");
      m_predicted.push_back(t);
    }
    return;
  }
  const size_t vocab = m_out.logits.size() / rows;
  if (vocab == 0 || vocab * rows != m_out.logits.size()) {
    throw Error("the head stage returned " + std::to_string(m_out.logits.size()) + " logits for " +
                std::to_string(rows) + " rows");
  }
  // The rows predict the positions from m_cached.size() + 1 - rows on (a verify's row r: the
  // draft at from + 1 + r; a plain step's one row: the next position). Each is drawn here as
  // the head, a node or a GPU stage would draw it (drawsByPosition).
  const size_t firstPredicted = m_cached.size() + 1 - rows;
  for (size_t r = 0; r < rows; ++r) {
    const std::span<const float> row = std::span(m_out.logits).subspan(r * vocab, vocab);
    if (drawsByPosition(options.sampler)) sampler.reseed(options.sampler.seed + firstPredicted + r);
    if (!sampledVerify || r + 1 == rows) {
      m_predicted.push_back(sampler.sample(row));
      continue;
    }
    // Row r decides the draft at from + 1 + r: kept, or replaced and the rest dropped.
    bool accepted = false;
    m_predicted.push_back(sampler.sampleDraft(row, m_cached[from + 1 + r], accepted));
    if (!accepted) break;
  }
}

void Session::replay() {
  m_chain.truncate(m_sequence, 0);
  const std::vector<Step> steps = m_steps;
  for (size_t i = 0; i < steps.size(); ++i) {
    const size_t begin = steps[i].start;
    const size_t end = i + 1 < steps.size() ? steps[i + 1].start : m_cached.size();
    const std::span<const model::TokenId> tokens(m_cached.data() + begin, end - begin);
    // Only the caches are rebuilt: no logits (over a pool, none cross the network).
    m_chain.forward(m_sequence, static_cast<int32_t>(begin), tokens, m_out, LogitRows::None,
                    nullptr, steps[i].decodeOrder);
  }
}

const std::vector<model::TokenId>& Session::step(size_t from, StepKind kind, Sampler& sampler,
                                                 const GenerateOptions& options,
                                                 GenerateResult& result) {
  // Forget steps at or after `from` (a shorter prompt rewrote history) and record this one.
  while (!m_steps.empty() && m_steps.back().start >= from) m_steps.pop_back();
  // A replay computes an Ahead step's tokens as one batch in decode order: the cache it left.
  m_steps.push_back({from, kind != StepKind::Plain});
  try {
    for (;;) {
      std::exception_ptr failure;
      try {
        compute(from, kind, sampler, options);
        return m_predicted;
      } catch (const std::exception&) {
        if (!m_recovery) throw;
        failure = std::current_exception();
      }
      // Repair, replay everything before this step, then run the step again. A stage that
      // fails during the replay is recovered from the same way.
      while (failure) {
        try {
          std::rethrow_exception(failure);
        } catch (const std::exception& e) {
          if (!m_recovery(e, m_chain.failedStage())) throw;
        }
        ++result.recoveries;
        failure = nullptr;
        const std::vector<Step> steps = m_steps;
        const std::vector<model::TokenId> all = m_cached;
        try {
          m_steps.pop_back();
          m_cached.resize(from);
          replay();
        } catch (const std::exception&) {
          failure = std::current_exception();
        }
        m_steps = steps;
        m_cached = all;
      }
    }
  } catch (...) {
    // Not recovered: the step did not happen. The session forgets it and the stages are told to
    // forget its positions (best effort: a lost stage may refuse), so the next generate() on
    // this session reuses only what every stage really holds.
    m_cached.resize(from);
    m_steps.pop_back();
    try {
      if (m_chain.truncate(m_sequence, static_cast<int32_t>(from)) < static_cast<int32_t>(from)) {
        m_cached.clear();  // a stage could not keep them all: start over next time
        m_steps.clear();
      }
    } catch (const std::exception&) {
      m_cached.clear();
      m_steps.clear();
    }
    throw;
  }
}

void Session::produce(int32_t room, Sampler& sampler, const GenerateOptions& options,
                      GenerateResult& result, std::vector<model::TokenId>& tokens) {
  const size_t from = m_cached.size() - 1;
  tokens.clear();
  // Without a penalty each row's distribution depends on nothing but the tokens before it:
  // greedy, a confirmed draft is exactly what plain decoding produces; sampled, the rejection
  // rule (Sampler::sampleDraft) keeps the reply's distribution.
  const bool speculate = options.lookup.maxDraft > 0 && options.sampler.repeatPenalty == 1.0f;
  m_draft.clear();
  const auto t0 = Clock::now();
  bool byModel = false;
  double oneOff = 0;  // a draft model's prefill of a new prompt: not a cost of this step
  if (speculate && room > 0) {
    const int32_t limit = std::min(room, m_chain.maxBatch() - 1);
    draftByPromptLookup(m_cached, options.lookup, limit, m_draft);
    if (options.lookup.adaptive) {
      const int32_t length = m_draftPolicy.length(static_cast<int32_t>(m_draft.size()));
      m_draft.resize(static_cast<size_t>(length));
    }
    if (m_draft.empty() && m_drafter) {
      // A draft model's tokens cost time to make: its policy sizes them before they are made.
      const int32_t most = std::min(limit, options.lookup.maxDraft);
      const int32_t want = options.lookup.adaptive ? m_modelPolicy.length(most) : most;
      if (want > 0) {
        oneOff = m_drafter->propose(m_cached, want, m_draft);
        byModel = !m_draft.empty();
      }
    }
  }
  DraftPolicy& policy = byModel ? m_modelPolicy : m_draftPolicy;
  if (m_draft.empty()) {
    // Decoding ahead: bursts of 2, 4, 8, ... tokens in a reply (its first text comes soon), up
    // to about kDecodeAheadBurstSeconds of decoding at the measured pace, within what is wanted
    // and what fits.
    int32_t ahead = 1;
    if (options.decodeAhead > 1 && options.sampler.repeatPenalty == 1.0f && room > 0) {
      ahead = fitDecodeAheadBurst(nextDecodeAheadBurst(m_aheadCount, m_secondsPerToken), room + 1,
                                  std::min(options.decodeAhead, m_chain.decodeAheadLimit()));
    }
    if (ahead > 1) {
      m_aheadCount = ahead;
      tokens = step(from, StepKind::Ahead, sampler, options, result);
      // The chain cached all but the last of them (the next step feeds that one).
      m_cached.insert(m_cached.end(), tokens.begin(), tokens.end() - 1);
      if (tokens.size() > 1) {
        ++result.aheadSteps;
        result.aheadTokens += static_cast<int32_t>(tokens.size());
      }
    } else {
      tokens.push_back(step(from, StepKind::Plain, sampler, options, result).front());
    }
    const double perToken = secondsSince(t0) / static_cast<double>(tokens.size());
    m_secondsPerToken = m_secondsPerToken > 0 ? 0.5 * (m_secondsPerToken + perToken) : perToken;
    if (speculate) {
      // What a token costs without drafts: a plain step, or its share of an Ahead step.
      m_draftPolicy.plainStep(perToken);
      m_modelPolicy.plainStep(perToken);
    }
    return;
  }
  m_cached.insert(m_cached.end(), m_draft.begin(), m_draft.end());
  const std::vector<model::TokenId>& predicted =
      step(from, StepKind::Verify, sampler, options, result);
  // predicted[j] follows m_cached[from + j]; drafted token j stands at from + 1 + j. A sampled
  // verification stops at its first rejection, whose token differs from the draft.
  size_t accepted = 0;
  while (accepted < m_draft.size() && accepted + 1 < predicted.size() &&
         predicted[accepted] == m_draft[accepted]) {
    ++accepted;
  }
  tokens.assign(m_draft.begin(), m_draft.begin() + static_cast<std::ptrdiff_t>(accepted));
  tokens.push_back(predicted[accepted]);
  // The rejected drafts' cache entries are left to be overwritten: a stage accepts a batch at
  // any position up to what it holds (SequenceBook::check), and attention sees only earlier
  // positions, so no truncate round trip is needed.
  m_cached.resize(from + 1 + accepted);
  policy.verifyStep(static_cast<int32_t>(m_draft.size()), static_cast<int32_t>(accepted),
                    secondsSince(t0) - oneOff);
  ++result.verifySteps;
  result.draftedTokens += static_cast<int32_t>(m_draft.size());
  result.acceptedTokens += static_cast<int32_t>(accepted);
  if (byModel) {
    result.modelDraftedTokens += static_cast<int32_t>(m_draft.size());
    result.modelAcceptedTokens += static_cast<int32_t>(accepted);
  }
}

GenerateResult Session::generate(const std::vector<model::TokenId>& prompt,
                                 const GenerateOptions& options, const TextCallback& onText) {
  if (prompt.empty()) throw Error("empty prompt");
  const int32_t ctx = m_chain.contextLength();
  if (static_cast<int64_t>(prompt.size()) >= ctx) {
    throw Error("prompt of " + std::to_string(prompt.size()) +
                " tokens does not fit the context of " + std::to_string(ctx) + " tokens");
  }
  for (model::TokenId t : prompt) {
    if (t < 0 || t >= m_tokenizer.size()) throw Error("prompt token id out of range");
  }

  GenerateResult result;
  result.promptTokens = static_cast<int32_t>(prompt.size());

  // Reuse the cached prefix; at least the last prompt token is recomputed for its logits.
  size_t common = 0;
  while (common < m_cached.size() && common < prompt.size() && m_cached[common] == prompt[common]) {
    ++common;
  }
  if (common == prompt.size()) --common;
  try {
    // The stages may keep fewer (a sliding-window ring that cannot resume there).
    common = static_cast<size_t>(m_chain.truncate(m_sequence, static_cast<int32_t>(common)));
  } catch (const std::exception& e) {
    // A stage lost since the last call (a pool node gone) fails here first: the chain is
    // repaired as for a failure mid-reply, and its empty caches start from position 0. The
    // cache is forgotten either way (no reply is under way: cachedTokens() is empty).
    m_cached.clear();
    m_steps.clear();
    if (!m_recovery || !m_recovery(e, m_chain.failedStage())) throw;
    ++result.recoveries;
    common = 0;
  }
  m_cached = prompt;
  result.reusedTokens = static_cast<int32_t>(common);
  m_aheadCount = 0;  // a reply's bursts start small

  Sampler sampler(options.sampler);
  for (model::TokenId t : prompt) sampler.accept(t);

  const auto t0 = Clock::now();
  // Tokens produced and not yet emitted: the prompt's next token, then each step's output.
  std::vector<model::TokenId> pending{step(common, StepKind::Plain, sampler, options, result)[0]};
  size_t emitted = 0;  // of pending
  result.prefillSeconds = secondsSince(t0);

  ReplyText text(m_tokenizer, options.stop);
  bool stopped = false;
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    result.text += piece;
    if (onText && !onText(piece)) stopped = true;
  };

  const auto tDecode = Clock::now();
  result.finish = FinishReason::Length;
  for (int32_t i = 0; i < options.maxTokens; ++i) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed)) {
      result.finish = FinishReason::Cancelled;
      break;
    }
    if (emitted == pending.size()) {
      m_cached.push_back(result.tokens.back());
      // Drafts may fill the tokens still wanted and the context still free (the loop's checks
      // below see each token as if it had been decoded alone).
      const int32_t room = std::min<int32_t>(options.maxTokens - i - 1,
                                             ctx - 1 - static_cast<int32_t>(m_cached.size()));
      produce(room, sampler, options, result, pending);
      emitted = 0;
    }
    const model::TokenId next = pending[emitted++];
    sampler.accept(next);
    result.tokens.push_back(next);
    if (!options.ignoreEndOfGeneration && m_tokenizer.isEndOfGeneration(next)) {
      result.finish = FinishReason::EndOfGeneration;
      break;
    }
    bool matched = false;
    emit(text.push(next, matched));
    if (matched) {
      result.finish = FinishReason::StopString;
      break;
    }
    if (stopped) {
      result.finish = FinishReason::Cancelled;
      break;
    }
    if (i + 1 == options.maxTokens) break;
    if (emitted == pending.size() && static_cast<int32_t>(m_cached.size()) + 1 >= ctx) {
      result.finish = FinishReason::ContextFull;
      break;
    }
  }
  result.decodeSeconds = secondsSince(tDecode);

  if (result.finish != FinishReason::StopString && result.finish != FinishReason::Cancelled) {
    bool matched = false;
    emit(text.finish(matched));
    if (matched) result.finish = FinishReason::StopString;
  }
  return result;
}

}  // namespace shoal::runtime
