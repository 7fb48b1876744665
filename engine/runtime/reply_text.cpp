#include "engine/runtime/reply_text.h"

#include <algorithm>
#include <utility>

namespace shoal::runtime {

ReplyText::ReplyText(const model::Tokenizer& tokenizer, std::vector<std::string> stops)
    : m_tokenizer(tokenizer), m_stops(std::move(stops)) {
  std::erase_if(m_stops, [](const std::string& s) { return s.empty(); });
}

std::string ReplyText::release(std::string piece, bool& stopped) {
  m_held += piece;
  size_t cut = std::string::npos;
  for (const std::string& s : m_stops) cut = std::min(cut, m_held.find(s));
  if (cut != std::string::npos) {
    stopped = true;
    std::string out = m_held.substr(0, cut);
    m_held.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of a stop string.
  size_t keep = 0;
  for (const std::string& s : m_stops) {
    for (size_t len = std::min(s.size() - 1, m_held.size()); len > keep; --len) {
      if (m_held.compare(m_held.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = m_held.substr(0, m_held.size() - keep);
  m_held.erase(0, m_held.size() - keep);
  return out;
}

std::string ReplyText::push(model::TokenId token, bool& stopped) {
  stopped = false;
  return release(m_utf8.push(m_tokenizer.tokenBytes(token)), stopped);
}

std::string ReplyText::finish(bool& stopped) {
  stopped = false;
  std::string out = release(m_utf8.flush(), stopped);
  if (!stopped) out += std::exchange(m_held, {});
  return out;
}

}  // namespace shoal::runtime
