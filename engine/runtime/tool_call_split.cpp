#include "engine/runtime/tool_call_split.h"

#include "engine/model/chat_template.h"
#include "engine/runtime/partial_tag.h"

namespace shoal::runtime {
namespace {

using model::kToolCallClose;
using model::kToolCallOpen;

bool allSpace(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace

void ToolCallSplit::run(Parts& out) {
  for (;;) {
    if (m_inCall) {
      const size_t close = m_held.find(kToolCallClose);
      if (close == std::string::npos) return;  // the call is still coming
      out.calls.push_back(m_held.substr(0, close));
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

ToolCallSplit::Parts ToolCallSplit::push(std::string_view text) {
  m_held.append(text);
  Parts out;
  run(out);
  return out;
}

ToolCallSplit::Parts ToolCallSplit::finish() {
  Parts out;
  run(out);
  if (m_inCall) {
    out.content += std::string(kToolCallOpen) + m_held;
  } else if (!(m_afterCall && allSpace(m_held))) {
    out.content += m_held;
  }
  m_held.clear();
  m_inCall = false;
  m_afterCall = false;
  return out;
}

ToolCallSplit::Parts ToolCallSplit::split(std::string_view reply) {
  ToolCallSplit s;
  Parts out = s.push(reply);
  Parts rest = s.finish();
  out.content += rest.content;
  for (std::string& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace shoal::runtime
