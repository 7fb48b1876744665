#include "engine/runtime/session.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"
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
  m_stepStarts.clear();
}

model::TokenId Session::compute(size_t from, Sampler& sampler, const GenerateOptions& options) {
  const std::span<const model::TokenId> tokens(m_cached.data() + from, m_cached.size() - from);
  SampleRequest sample;
  sample.temperature = options.sampler.temperature;
  sample.topP = options.sampler.topP;
  sample.topK = options.sampler.topK;
  sample.minP = options.sampler.minP;
  // The seed follows the position sampled, so a replay draws the same numbers.
  sample.seed = options.sampler.seed + m_cached.size();
  // A head stage that samples (on its device, or a pool's last node) has no token history, so a
  // repetition penalty needs the logits here.
  const bool headMaySample = options.sampler.repeatPenalty == 1.0f;
  m_chain.forward(m_sequence, static_cast<int32_t>(from), tokens, m_out, LogitRows::Last,
                  headMaySample ? &sample : nullptr);
  if (!m_out.tokens.empty()) {
    const model::TokenId t = m_out.tokens.back();
    if (t < 0 || t >= m_tokenizer.size()) throw Error("the head stage sampled an unknown token");
    return t;
  }
  return sampler.sample(m_out.logits);
}

void Session::replay() {
  m_chain.truncate(m_sequence, 0);
  const std::vector<size_t> starts = m_stepStarts;
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t end = i + 1 < starts.size() ? starts[i + 1] : m_cached.size();
    const std::span<const model::TokenId> tokens(m_cached.data() + starts[i], end - starts[i]);
    // Only the caches are rebuilt: no logits (over a pool, none cross the network).
    m_chain.forward(m_sequence, static_cast<int32_t>(starts[i]), tokens, m_out, LogitRows::None);
  }
}

model::TokenId Session::step(size_t from, Sampler& sampler, const GenerateOptions& options,
                             GenerateResult& result) {
  // Forget steps at or after `from` (a shorter prompt rewrote history) and record this one.
  while (!m_stepStarts.empty() && m_stepStarts.back() >= from) m_stepStarts.pop_back();
  m_stepStarts.push_back(from);
  try {
    for (;;) {
      std::exception_ptr failure;
      try {
        return compute(from, sampler, options);
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
        const std::vector<size_t> starts = m_stepStarts;
        const std::vector<model::TokenId> all = m_cached;
        try {
          m_stepStarts.pop_back();
          m_cached.resize(from);
          replay();
        } catch (const std::exception&) {
          failure = std::current_exception();
        }
        m_stepStarts = starts;
        m_cached = all;
      }
    }
  } catch (...) {
    // Not recovered: the step did not happen. The session forgets it and the stages are told to
    // forget its positions (best effort: a lost stage may refuse), so the next generate() on
    // this session reuses only what every stage really holds.
    m_cached.resize(from);
    m_stepStarts.pop_back();
    try {
      m_chain.truncate(m_sequence, static_cast<int32_t>(from));
    } catch (const std::exception&) {
      m_cached.clear();
      m_stepStarts.clear();
    }
    throw;
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
    m_chain.truncate(m_sequence, static_cast<int32_t>(common));
  } catch (const std::exception& e) {
    // A stage lost since the last call (a pool node gone) fails here first: the chain is
    // repaired as for a failure mid-reply, and its empty caches start from position 0. The
    // cache is forgotten either way (no reply is under way: cachedTokens() is empty).
    m_cached.clear();
    m_stepStarts.clear();
    if (!m_recovery || !m_recovery(e, m_chain.failedStage())) throw;
    ++result.recoveries;
    common = 0;
  }
  m_cached = prompt;
  result.reusedTokens = static_cast<int32_t>(common);

  Sampler sampler(options.sampler);
  for (model::TokenId t : prompt) sampler.accept(t);

  const auto t0 = Clock::now();
  model::TokenId next = step(common, sampler, options, result);
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
    if (i > 0) {
      m_cached.push_back(result.tokens.back());
      next = step(m_cached.size() - 1, sampler, options, result);
    }
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
    if (static_cast<int32_t>(m_cached.size()) + 1 >= ctx) {
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
