#include "engine/model/tokenizer_special.h"

#include <algorithm>

namespace shoal::model {

TokenTextIndex::TokenTextIndex(const std::vector<std::string>& tokens) {
  m_ids.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    m_ids.insert_or_assign(tokens[i], static_cast<TokenId>(i));
  }
}

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) {
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    const TokenAttr attr = vocab.attrs[i];
    if (attr != TokenAttr::Control && attr != TokenAttr::UserDefined &&
        attr != TokenAttr::Unknown) {
      continue;
    }
    if (vocab.tokens[i].empty()) continue;  // cannot occur in text
    m_candidates.push_back(
        {static_cast<TokenId>(i), vocab.tokens[i], attr != TokenAttr::UserDefined});
  }
  // Longest first; llama.cpp leaves the order of equal lengths unspecified (std::sort), here it
  // is by id.
  std::stable_sort(
      m_candidates.begin(), m_candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.text.size() > b.text.size(); });
}

std::vector<Fragment> SpecialTokenSplitter::split(std::string_view text, bool parseSpecial) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (const Candidate& c : m_candidates) {
    if (c.onlyWhenParsingSpecial && !parseSpecial) continue;
    if (text.find(c.text) == std::string_view::npos) continue;  // common case: not in the text
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.isToken()) {
        next.push_back(f);
        continue;
      }
      const std::string_view part = text.substr(f.offset, f.length);
      size_t from = 0;
      for (size_t hit = part.find(c.text); hit != std::string_view::npos;
           hit = part.find(c.text, from)) {
        if (hit > from) next.push_back({-1, f.offset + from, hit - from});
        next.push_back({c.id, 0, 0});
        from = hit + c.text.size();
      }
      if (from < part.size()) next.push_back({-1, f.offset + from, part.size() - from});
    }
    fragments.swap(next);
  }
  return fragments;
}

std::optional<uint8_t> byteTokenValue(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return std::nullopt;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]);
  const int lo = hex(text[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

std::vector<std::string> tokenPieces(
    const Vocab& vocab, const std::function<std::string(const std::string&)>& normalText) {
  std::vector<std::string> pieces(vocab.tokens.size());
  for (size_t id = 0; id < pieces.size(); ++id) {
    const std::string& text = vocab.tokens[id];
    switch (vocab.attrs[id]) {
      case TokenAttr::Control:
      case TokenAttr::Unknown:
      case TokenAttr::UserDefined:
        pieces[id] = text;
        break;
      case TokenAttr::Normal:
        pieces[id] = normalText(text);
        break;
      case TokenAttr::Byte:
        if (const auto b = byteTokenValue(text)) pieces[id] = std::string(1, static_cast<char>(*b));
        break;
      case TokenAttr::Undefined:
      case TokenAttr::Unused:
        break;  // llama.cpp renders these as nothing
    }
  }
  return pieces;
}

}  // namespace shoal::model
