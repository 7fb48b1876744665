#include "engine/runtime/session.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"

namespace shoal::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Holds back the tail of the text that might be the start of a stop string, and finds complete
// stop strings. Text before a match is final.
class StopMatcher {
 public:
  explicit StopMatcher(const std::vector<std::string>& stops) : m_stops(stops) {
    for (const auto& s : m_stops) m_longest = std::max(m_longest, s.size());
  }

  // Appends text; returns the text that is now safe to emit. Sets matched when a stop string
  // completed (the emitted text then ends before it, and nothing more should be emitted).
  std::string push(std::string_view piece, bool& matched) {
    m_buffer += piece;
    matched = false;
    size_t cut = std::string::npos;
    for (const auto& s : m_stops) {
      if (s.empty()) continue;
      const size_t at = m_buffer.find(s);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    if (cut != std::string::npos) {
      matched = true;
      std::string out = m_buffer.substr(0, cut);
      m_buffer.clear();
      return out;
    }
    // Keep the longest suffix that is a proper prefix of some stop string.
    size_t keep = 0;
    for (const auto& s : m_stops) {
      for (size_t len = std::min(s.size() - (s.empty() ? 0 : 1), m_buffer.size()); len > keep;
           --len) {
        if (m_buffer.compare(m_buffer.size() - len, len, s, 0, len) == 0) {
          keep = len;
          break;
        }
      }
    }
    std::string out = m_buffer.substr(0, m_buffer.size() - keep);
    m_buffer.erase(0, m_buffer.size() - keep);
    return out;
  }

  std::string flush() { return std::exchange(m_buffer, {}); }

 private:
  const std::vector<std::string>& m_stops;
  size_t m_longest = 0;
  std::string m_buffer;
};

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

Session::Session(Chain& chain, const model::Tokenizer& tokenizer, int32_t sequence)
    : m_chain(chain), m_tokenizer(tokenizer), m_sequence(sequence) {}

void Session::reset() {
  m_chain.truncate(m_sequence, 0);
  m_cached.clear();
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
  m_chain.truncate(m_sequence, static_cast<int32_t>(common));
  m_cached.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(common));
  result.reusedTokens = static_cast<int32_t>(common);

  Sampler sampler(options.sampler);
  for (model::TokenId t : prompt) sampler.accept(t);

  const auto t0 = Clock::now();
  const std::span<const model::TokenId> fresh(prompt.data() + common, prompt.size() - common);
  m_chain.forward(m_sequence, static_cast<int32_t>(common), fresh, m_logits);
  m_cached.insert(m_cached.end(), fresh.begin(), fresh.end());
  result.prefillSeconds = secondsSince(t0);

  model::Utf8StreamDecoder utf8;
  StopMatcher stops(options.stop);
  bool stopped = false;
  auto emit = [&](std::string_view piece) {
    if (piece.empty()) return;
    result.text += piece;
    if (onText && !onText(piece)) stopped = true;
  };

  const auto tDecode = Clock::now();
  bool firstToken = true;
  for (int32_t i = 0; i < options.maxTokens; ++i) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed)) {
      result.finish = FinishReason::Cancelled;
      break;
    }
    const model::TokenId next = sampler.sample(m_logits);
    sampler.accept(next);
    result.tokens.push_back(next);
    if (!options.ignoreEndOfGeneration && m_tokenizer.isEndOfGeneration(next)) {
      result.finish = FinishReason::EndOfGeneration;
      break;
    }
    bool matched = false;
    emit(stops.push(utf8.push(m_tokenizer.tokenBytes(next)), matched));
    if (matched) {
      result.finish = FinishReason::StopString;
      break;
    }
    if (stopped) {
      result.finish = FinishReason::Cancelled;
      break;
    }
    if (i + 1 == options.maxTokens) {
      result.finish = FinishReason::Length;
      break;
    }
    if (static_cast<int32_t>(m_cached.size()) + 1 >= ctx) {
      result.finish = FinishReason::ContextFull;
      break;
    }
    if (firstToken) {
      firstToken = false;
    }
    m_chain.forward(m_sequence, static_cast<int32_t>(m_cached.size()), std::span(&next, 1),
                    m_logits);
    m_cached.push_back(next);
  }
  if (options.maxTokens <= 0) result.finish = FinishReason::Length;
  result.decodeSeconds = secondsSince(tDecode);

  if (result.finish != FinishReason::StopString && result.finish != FinishReason::Cancelled) {
    bool matched = false;
    emit(stops.push(utf8.flush(), matched));
    if (matched) {
      result.finish = FinishReason::StopString;
    } else {
      emit(stops.flush());
    }
  }
  return result;
}

}  // namespace shoal::runtime
