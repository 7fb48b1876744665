#include "engine/runtime/tool_call_split.h"

#include "engine/runtime/partial_tag.h"

namespace shoal::runtime {
namespace {

using model::kPythonTag;
using model::kToolCallClose;
using model::kToolCallOpen;

constexpr std::string_view kSpace = " \t\r\n";

bool allSpace(std::string_view s) { return s.find_first_not_of(kSpace) == std::string_view::npos; }

// Whether `text` is a proper prefix of `tag` (more text may complete it).
bool couldBecome(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

}  // namespace

ToolCallSplit::ToolCallSplit(model::ToolCallSyntax syntax) : m_syntax(syntax) {}

void ToolCallSplit::runTags(Parts& out) {
  for (;;) {
    if (m_inCall) {
      const size_t close = m_held.find(kToolCallClose);
      if (close == std::string::npos) return;  // the call is still coming
      std::string body = m_held.substr(0, close);
      std::string original = std::string(kToolCallOpen) + body + std::string(kToolCallClose);
      out.calls.push_back({std::move(body), std::move(original)});
      m_held.erase(0, close + kToolCallClose.size());
      m_inCall = false;
      m_afterCall = true;
      continue;
    }
    const size_t open = m_held.find(kToolCallOpen);
    const size_t ready =
        open != std::string::npos ? open : m_held.size() - partialTagAtEnd(m_held, kToolCallOpen);
    const std::string_view text = std::string_view(m_held).substr(0, ready);
    // After a call, whitespace waits for text to follow it; before the next call it is dropped.
    if (m_afterCall && allSpace(text)) {
      if (open == std::string::npos) return;
    } else {
      out.content.append(text);
      m_afterCall = false;
    }
    if (open == std::string::npos) {
      m_held.erase(0, ready);
      return;
    }
    m_held.erase(0, open + kToolCallOpen.size());
    m_inCall = true;
  }
}

void ToolCallSplit::runJsonReply(Parts& out) {
  if (m_replyKind == 0) {
    const size_t first = m_held.find_first_not_of(kSpace);
    if (first == std::string::npos) return;  // nothing but whitespace yet
    const std::string_view start = std::string_view(m_held).substr(first);
    if (start.front() == '{' || start.starts_with(kPythonTag)) {
      m_replyKind = 1;
    } else if (!couldBecome(start, kPythonTag)) {
      m_replyKind = 2;
    }
  }
  if (m_replyKind == 2) {
    out.content += m_held;
    m_held.clear();
  }
}

ToolCallSplit::Parts ToolCallSplit::push(std::string_view text) {
  m_held.append(text);
  Parts out;
  if (m_syntax == model::ToolCallSyntax::JsonReply) {
    runJsonReply(out);
  } else {
    runTags(out);
  }
  return out;
}

ToolCallSplit::Parts ToolCallSplit::finish() {
  Parts out;
  if (m_syntax == model::ToolCallSyntax::JsonReply) {
    runJsonReply(out);
    if (m_replyKind == 1) {
      std::string_view body = m_held;
      body.remove_prefix(body.find_first_not_of(kSpace));
      if (body.starts_with(kPythonTag)) body.remove_prefix(kPythonTag.size());
      out.calls.push_back({std::string(body), m_held});
    } else {
      out.content += m_held;
    }
  } else {
    runTags(out);
    if (m_inCall) {
      out.content += std::string(kToolCallOpen) + m_held;
    } else if (!(m_afterCall && allSpace(m_held))) {
      out.content += m_held;
    }
  }
  m_held.clear();
  m_inCall = false;
  m_afterCall = false;
  m_replyKind = 0;
  return out;
}

ToolCallSplit::Parts ToolCallSplit::split(std::string_view reply, model::ToolCallSyntax syntax) {
  ToolCallSplit s(syntax);
  Parts out = s.push(reply);
  Parts rest = s.finish();
  out.content += rest.content;
  for (Call& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace shoal::runtime
