#include "engine/runtime/reasoning_split.h"

#include <algorithm>

#include "engine/runtime/partial_tag.h"

namespace shoal::runtime {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool isSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

constexpr std::string_view kStartAssistant = "<|start|>assistant";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
// What ends a harmony message: <|end|>, or the stop tokens when a caller keeps them.
constexpr std::string_view kMessageEnds[] = {"<|end|>", "<|return|>", "<|call|>"};

// Whether `text` is a proper prefix of `tag` (more text may complete it).
bool couldBecome(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

}  // namespace

ReasoningSplit::ReasoningSplit(bool startsInReasoning)
    : m_state(startsInReasoning ? State::Reasoning : State::Start) {}

// Header: skip <|start|>assistant, then read <|channel|>NAME<|message|>; anything else makes
// the rest of the reply answer. Message: give out text up to a message end.
bool ReasoningSplit::runHarmony(Parts& out) {
  if (m_state == State::Header) {
    std::string_view held = m_held;
    if (held.starts_with(kStartAssistant)) {
      m_held.erase(0, kStartAssistant.size());
      return true;
    }
    if (couldBecome(held, kStartAssistant) || couldBecome(held, kChannel)) return false;
    if (!held.starts_with(kChannel)) {
      m_state = State::Content;
      return true;
    }
    const size_t message = held.find(kMessage);
    if (message == std::string_view::npos) return false;  // the channel name is still coming
    const std::string_view name = held.substr(kChannel.size(), message - kChannel.size());
    const bool analysis = name == "analysis";
    if (analysis && m_reasoningStarted) out.reasoning += "\n\n";  // a second analysis
    m_analysis = analysis;
    m_held.erase(0, message + kMessage.size());
    m_state = State::Message;
    return true;
  }
  // Message.
  std::string& part = m_analysis ? out.reasoning : out.content;
  const size_t before = part.size();
  size_t end = std::string::npos, endSize = 0;
  for (std::string_view tag : kMessageEnds) {
    const size_t at = m_held.find(tag);
    if (at < end) {
      end = at;
      endSize = tag.size();
    }
  }
  const bool ended = end != std::string::npos;
  if (!ended) {  // hold a possible start of a message end
    size_t keep = 0;
    for (std::string_view tag : kMessageEnds) keep = std::max(keep, partialTagAtEnd(m_held, tag));
    end = m_held.size() - keep;
  }
  part.append(m_held, 0, end);
  m_held.erase(0, end + endSize);
  if (m_analysis && part.size() > before) m_reasoningStarted = true;
  if (ended) m_state = State::Header;
  return ended;
}

ReasoningSplit::Parts ReasoningSplit::push(std::string_view text) {
  m_held.append(text);
  Parts out;
  run(out);
  return out;
}

void ReasoningSplit::run(Parts& out) {
  for (;;) {
    switch (m_state) {
      case State::Header:
      case State::Message:
        if (!runHarmony(out)) return;
        continue;
      case State::Start: {
        const size_t first =
            std::find_if_not(m_held.begin(), m_held.end(), isSpace) - m_held.begin();
        const std::string_view rest = std::string_view(m_held).substr(first);
        if (rest.substr(0, kOpen.size()) == kOpen) {
          m_held.erase(0, first + kOpen.size());
          m_state = State::Reasoning;
          continue;
        }
        if (rest.starts_with(kChannel)) {  // harmony (gpt-oss)
          m_held.erase(0, first);
          m_state = State::Header;
          continue;
        }
        // May still become <think> or <|channel|>.
        if (couldBecome(rest, kOpen) || couldBecome(rest, kChannel) || rest.empty()) return;
        m_state = State::Content;
        continue;
      }
      case State::Reasoning: {
        if (!m_reasoningStarted) {  // the newline after <think>
          const size_t first = m_held.find_first_not_of('\n');
          m_held.erase(0, first == std::string::npos ? m_held.size() : first);
          if (m_held.empty()) return;
          m_reasoningStarted = true;
        }
        const size_t close = m_held.find(kClose);
        if (close != std::string::npos) {
          std::string_view inside = std::string_view(m_held).substr(0, close);
          while (!inside.empty() && inside.back() == '\n') inside.remove_suffix(1);
          out.reasoning.append(inside);
          m_held.erase(0, close + kClose.size());
          m_state = State::AfterThink;
          continue;
        }
        // Hold a possible start of </think>, and trailing newlines (dropped if it follows).
        size_t keep = partialTagAtEnd(m_held, kClose);
        while (keep < m_held.size() && m_held[m_held.size() - keep - 1] == '\n') ++keep;
        out.reasoning.append(m_held, 0, m_held.size() - keep);
        m_held.erase(0, m_held.size() - keep);
        return;
      }
      case State::AfterThink: {
        const size_t first = m_held.find_first_not_of('\n');
        if (first == std::string::npos) {
          m_held.clear();
          return;
        }
        m_held.erase(0, first);
        m_state = State::Content;
        continue;
      }
      case State::Content:
        out.content.append(m_held);
        m_held.clear();
        return;
    }
  }
}

ReasoningSplit::Parts ReasoningSplit::finish() {
  Parts out;
  switch (m_state) {
    case State::Start:
    case State::Content:
      out.content = std::move(m_held);
      break;
    case State::Reasoning: {
      std::string_view rest = m_held;
      while (!rest.empty() && rest.back() == '\n') rest.remove_suffix(1);
      out.reasoning = std::string(rest);
      break;
    }
    case State::AfterThink:
      break;
    case State::Header:  // not a header after all
      out.content = std::move(m_held);
      break;
    case State::Message:
      (m_analysis ? out.reasoning : out.content) = std::move(m_held);
      break;
  }
  m_held.clear();
  return out;
}

ReasoningSplit::Parts ReasoningSplit::split(std::string_view reply, bool startsInReasoning) {
  ReasoningSplit s(startsInReasoning);
  Parts out = s.push(reply);
  const Parts rest = s.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

}  // namespace shoal::runtime
