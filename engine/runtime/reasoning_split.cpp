#include "engine/runtime/reasoning_split.h"

#include <algorithm>

namespace shoal::runtime {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool isSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partialTagAtEnd(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ReasoningSplit::ReasoningSplit(bool startsInReasoning)
    : m_state(startsInReasoning ? State::Reasoning : State::Start) {}

ReasoningSplit::Parts ReasoningSplit::push(std::string_view text) {
  m_held.append(text);
  Parts out;
  run(out);
  return out;
}

void ReasoningSplit::run(Parts& out) {
  for (;;) {
    switch (m_state) {
      case State::Start: {
        const size_t first =
            std::find_if_not(m_held.begin(), m_held.end(), isSpace) - m_held.begin();
        const std::string_view rest = std::string_view(m_held).substr(first);
        if (rest.substr(0, kOpen.size()) == kOpen) {
          m_held.erase(0, first + kOpen.size());
          m_state = State::Reasoning;
          continue;
        }
        if (kOpen.substr(0, rest.size()) == rest) return;  // may still become <think>
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
