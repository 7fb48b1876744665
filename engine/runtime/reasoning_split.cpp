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

// A harmony recipient: " to=functions.f" after <|start|>assistant (or "to=..." where the reply
// begins right after the prompt's <|start|>assistant), or in a channel header.
constexpr std::string_view kTo = "to=";
// How long a recipient before <|channel|> may be before the text is taken as no header at all.
constexpr size_t kMaxRecipientBytes = 256;

// The recipient named in a channel header ("commentary to=functions.f <|constrain|>json"), or
// empty.
std::string recipientIn(std::string_view name) {
  const size_t at = name.find(" to=");
  if (at == std::string_view::npos) return {};
  const std::string_view rest = name.substr(at + 4);
  return std::string(rest.substr(0, rest.find_first_of(" <")));
}

}  // namespace

ReasoningSplit::ReasoningSplit(bool startsInReasoning)
    : m_state(startsInReasoning ? State::Reasoning : State::Start) {}

// Header: skip <|start|>assistant and a recipient after it, then read
// <|channel|>NAME<|message|>; anything else makes the rest of the reply answer. Message: give
// out text up to a message end (a message to a recipient is kept whole, then given as a call).
bool ReasoningSplit::runHarmony(Parts& out) {
  if (m_state == State::Header) {
    std::string_view held = m_held;
    if (held.starts_with(kStartAssistant)) {
      m_held.erase(0, kStartAssistant.size());
      return true;
    }
    const size_t space = held.starts_with(' ') ? 1 : 0;
    if (held.substr(space).starts_with(kTo)) {
      const size_t channel = held.find(kChannel);
      if (channel == std::string_view::npos) {
        if (held.size() <= kMaxRecipientBytes) return false;  // the recipient is still coming
        m_state = State::Content;
        return true;
      }
      const std::string_view to = held.substr(space + kTo.size(), channel - space - kTo.size());
      m_recipient = std::string(to.substr(0, to.find(' ')));
      m_held.erase(0, channel);
      return true;
    }
    if (couldBecome(held, kStartAssistant) || couldBecome(held, kChannel) ||
        couldBecome(held.substr(space), kTo)) {
      return false;
    }
    if (!held.starts_with(kChannel)) {
      m_state = State::Content;
      return true;
    }
    const size_t message = held.find(kMessage);
    if (message == std::string_view::npos) return false;  // the channel name is still coming
    const std::string_view name = held.substr(kChannel.size(), message - kChannel.size());
    if (std::string to = recipientIn(name); !to.empty()) m_recipient = std::move(to);
    const bool analysis = m_recipient.empty() && name == "analysis";
    if (analysis && m_reasoningStarted) out.reasoning += "\n\n";  // a second analysis
    m_analysis = analysis;
    m_held.erase(0, message + kMessage.size());
    m_state = State::Message;
    return true;
  }
  // Message.
  std::string& part = !m_recipient.empty() ? m_addressed : m_analysis ? out.reasoning : out.content;
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
  if (ended) {
    if (!m_recipient.empty()) {
      out.addressed.push_back({std::move(m_recipient), std::move(m_addressed)});
      m_recipient.clear();
      m_addressed.clear();
    }
    m_state = State::Header;
  }
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
        // Harmony (gpt-oss): a channel header, or a recipient right after the prompt's
        // <|start|>assistant.
        if (rest.starts_with(kChannel) || rest.starts_with(kTo)) {
          m_held.erase(0, first);
          m_state = State::Header;
          continue;
        }
        // May still become <think>, <|channel|> or a recipient.
        if (couldBecome(rest, kOpen) || couldBecome(rest, kChannel) || couldBecome(rest, kTo) ||
            rest.empty()) {
          return;
        }
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
      // A call ends with <|call|>, a stop string the caller leaves out: the message is whole.
      if (!m_recipient.empty()) {
        out.addressed.push_back({std::move(m_recipient), m_addressed + m_held});
      } else {
        (m_analysis ? out.reasoning : out.content) = std::move(m_held);
      }
      break;
  }
  m_held.clear();
  m_recipient.clear();
  m_addressed.clear();
  return out;
}

ReasoningSplit::Parts ReasoningSplit::split(std::string_view reply, bool startsInReasoning) {
  ReasoningSplit s(startsInReasoning);
  Parts out = s.push(reply);
  Parts rest = s.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  for (Addressed& a : rest.addressed) out.addressed.push_back(std::move(a));
  return out;
}

}  // namespace shoal::runtime
