#include "engine/model/pretokenizer.h"

#include <algorithm>
#include <array>

#include "engine/error.h"
#include "engine/model/unicode_props.h"

namespace shoal::model {

namespace {

using unicode::CodepointFlags;
using unicode::kFlagLetter;
using unicode::kFlagNumber;
using unicode::kFlagPunctuation;
using unicode::kFlagWhitespace;

struct NamedSpec {
  std::vector<std::string_view> names;
  std::vector<SplitRule> rules;
  bool ignoreMerges;
};

// tokenizer.ggml.pre names and what llama.cpp does for each (llama-vocab.cpp: the name ->
// LLAMA_VOCAB_PRE_TYPE_* table in llama_vocab::impl::load, and the regex list per type in the
// llm_tokenizer_bpe constructor). Types whose extra settings Shoal does not implement (add_sep,
// per-token lstrip, other regexes) are left out and refused by name.
const std::vector<NamedSpec>& namedSpecs() {
  using R = SplitRule;
  static const std::vector<NamedSpec> specs = {
      // LLAMA_VOCAB_PRE_TYPE_DEFAULT; also what llama.cpp uses when the key is missing.
      {{"default", ""}, {R::PunctuationRuns, R::Gpt2, R::NumberRuns, R::AsciiDigitTriples}, false},
      // GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING: the GPT-2 regex alone.
      {{"gpt-2", "phi-2", "gigachat", "a.x-4.0", "mellum", "exaone4", "mpt", "olmo", "jais",
        "trillion", "granite-docling"},
       {R::Gpt2},
       false},
      // STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2: digits are
      // split off one by one first, then the GPT-2 regex runs inside the rest.
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
        "mellum2"},
       {R::EachNumber, R::Gpt2},
       false},
      // LLAMA3 (these names also set ignore_merges and default add_bos to true).
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano"},
       {R::Llama3},
       true},
      // DBRX, SMAUG: the Llama 3 regex without the other Llama 3 settings.
      {{"dbrx", "smaug-bpe"}, {R::Llama3}, false},
      // QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN.
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
        "solar-open"},
       {R::Qwen2},
       false},
  };
  return specs;
}

// Emits pieces of one fragment: everything between the previous cut and `end` becomes a piece.
class PieceWriter {
 public:
  PieceWriter(std::vector<size_t>& out, size_t begin) : m_out(out), m_prev(begin) {}
  void cutAt(size_t end) {
    if (end > m_prev) m_out.push_back(end - m_prev);
    m_prev = end;
  }

 private:
  std::vector<size_t>& m_out;
  size_t m_prev;
};

// One fragment of text as the matchers see it: codepoints and their flags, with position
// outside [begin, end) reading as "nothing there" (flags 0, no codepoint), exactly as
// llama.cpp's matchers see the end of a fragment.
struct Span {
  const uint32_t* cpts;
  const CodepointFlags* flags;
  size_t begin;
  size_t end;

  static constexpr uint32_t kNone = 0xFFFFFFFF;
  uint32_t cpt(size_t i) const { return i >= begin && i < end ? cpts[i] : kNone; }
  CodepointFlags flag(size_t i) const { return i >= begin && i < end ? flags[i] : 0; }
};

constexpr CodepointFlags kWordClasses = kFlagWhitespace | kFlagLetter | kFlagNumber;

uint32_t asciiLower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

// Length of a contraction ('s 't 'm 'd 're 've 'll) at pos, 0 if none. Case-insensitive for the
// Llama 3 family: llama.cpp lowercases with Unicode tables, but only ASCII capitals lowercase to
// these letters (checked by tools/gen_unicode_tables.py), so ASCII folding is the same.
size_t contractionAt(const Span& s, size_t pos, bool foldCase) {
  if (s.cpt(pos) != '\'' || pos + 1 >= s.end) return 0;
  const auto fold = [&](uint32_t c) { return foldCase ? asciiLower(c) : c; };
  const uint32_t c1 = fold(s.cpt(pos + 1));
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 < s.end) {
    const uint32_t c2 = fold(s.cpt(pos + 2));
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  }
  return 0;
}

// Whitespace at pos: \s+(?!\S) gives all but the last of a run followed by a non-space (a run of
// one gives nothing), else \s+ the whole run. Returns the end of the piece, or pos if none.
size_t whitespaceRunEnd(const Span& s, size_t pos) {
  size_t n = 0;
  while (s.flag(pos + n) & kFlagWhitespace) ++n;
  if (n > 1 && s.cpt(pos + n) != Span::kNone) return pos + n - 1;
  return pos + n;
}

void splitGpt2(const Span& s, std::vector<size_t>& out) {
  PieceWriter w(out, s.begin);
  for (size_t pos = s.begin; pos < s.end;) {
    const uint32_t c = s.cpt(pos);
    if (const size_t n = contractionAt(s, pos, false); n > 0) {
      pos += n;
      w.cutAt(pos);
      continue;
    }
    // " ?X+" for X in letters, numbers, and "neither space, letter nor number": the optional
    // space belongs to the run after it.
    CodepointFlags f = c == ' ' ? s.flag(pos + 1) : s.flag(pos);
    const CodepointFlags runClass = (f & kFlagLetter)   ? kFlagLetter
                                    : (f & kFlagNumber) ? kFlagNumber
                                                        : 0;
    if (runClass != 0) {
      pos += c == ' ' ? 1 : 0;
      while (f & runClass) f = s.flag(++pos);
      w.cutAt(pos);
      continue;
    }
    if (!(f & kWordClasses) && f != 0) {
      pos += c == ' ' ? 1 : 0;
      while (!(f & kWordClasses) && f != 0) f = s.flag(++pos);
      w.cutAt(pos);
      continue;
    }
    if (const size_t end = whitespaceRunEnd(s, pos); end > pos) {
      pos = end;
      w.cutAt(pos);
      continue;
    }
    w.cutAt(++pos);  // nothing matched: the codepoint stands alone
  }
}

// The Llama 3 / Qwen2 pattern; maxDigits is 3 for \p{N}{1,3} and 1 for \p{N}.
void splitLlama3(const Span& s, size_t maxDigits, std::vector<size_t>& out) {
  PieceWriter w(out, s.begin);
  for (size_t pos = s.begin; pos < s.end;) {
    const uint32_t c = s.cpt(pos);
    const CodepointFlags f = s.flag(pos);
    if (const size_t n = contractionAt(s, pos, true); n > 0) {
      pos += n;
      w.cutAt(pos);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(c == '\r' || c == '\n' || (f & kFlagNumber))) {
      if ((f & kFlagLetter) || (s.flag(pos + 1) & kFlagLetter)) {
        ++pos;
        while (s.flag(pos) & kFlagLetter) ++pos;
        w.cutAt(pos);
        continue;
      }
    }
    // \p{N}{1,maxDigits}
    if (f & kFlagNumber) {
      size_t first = pos;
      while (s.flag(pos) & kFlagNumber) {
        if (++pos - first >= maxDigits) {
          w.cutAt(pos);
          first = pos;
        }
      }
      w.cutAt(pos);
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*". The guard tests the flags of pos itself (never 0 here), as
    // llama.cpp does: a space that ends the fragment is taken alone by this branch, which the
    // regex's \s+(?!\S) would also give.
    CodepointFlags f2 = c == ' ' ? s.flag(pos + 1) : f;
    if (!(f2 & kWordClasses) && f != 0) {
      pos += c == ' ' ? 1 : 0;
      while (!(f2 & kWordClasses) && f2 != 0) f2 = s.flag(++pos);
      while (s.cpt(pos) == '\r' || s.cpt(pos) == '\n') ++pos;
      w.cutAt(pos);
      continue;
    }
    // \s*[\r\n]+ : up to and including the last \r or \n of the whitespace run.
    size_t n = 0;
    size_t afterLastNewline = 0;
    while (s.flag(pos + n) & kFlagWhitespace) {
      const uint32_t ws = s.cpt(pos + n);
      if (ws == '\r' || ws == '\n') afterLastNewline = pos + n + 1;
      ++n;
    }
    if (afterLastNewline > 0) {
      pos = afterLastNewline;
      w.cutAt(pos);
      continue;
    }
    if (const size_t end = whitespaceRunEnd(s, pos); end > pos) {  // \s+(?!\S) | \s+
      pos = end;
      w.cutAt(pos);
      continue;
    }
    w.cutAt(++pos);
  }
}

// A regex without alternatives run the way llama.cpp runs a std::regex: leftmost matches in
// order, and the text between two matches is a piece of its own. matchAt gives the length of a
// match starting at pos (0 for none).
template <typename MatchAt>
void splitByMatches(const Span& s, MatchAt matchAt, std::vector<size_t>& out) {
  PieceWriter w(out, s.begin);
  for (size_t pos = s.begin; pos < s.end;) {
    const size_t n = matchAt(pos);
    if (n == 0) {
      ++pos;
      continue;
    }
    w.cutAt(pos);  // the gap before the match
    pos += n;
    w.cutAt(pos);
  }
  w.cutAt(s.end);
}

bool isNumber(const Span& s, size_t i) { return (s.flag(i) & kFlagNumber) != 0; }

// [\p{P}\$\+<=>\^~\|]: punctuation plus eight ASCII symbols (not '`').
bool isPunctuationRunChar(const Span& s, size_t i) {
  if (s.flag(i) & kFlagPunctuation) return true;
  const uint32_t c = s.cpt(i);
  return c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' ||
         c == '|';
}

bool isAsciiDigit(const Span& s, size_t i) {
  const uint32_t c = s.cpt(i);
  return c >= '0' && c <= '9';
}

void applyRule(SplitRule rule, const Span& s, std::vector<size_t>& out) {
  switch (rule) {
    case SplitRule::Gpt2:
      splitGpt2(s, out);
      return;
    case SplitRule::Llama3:
      splitLlama3(s, 3, out);
      return;
    case SplitRule::Qwen2:
      splitLlama3(s, 1, out);
      return;
    case SplitRule::EachNumber:
      splitByMatches(
          s, [&](size_t p) -> size_t { return isNumber(s, p) ? 1 : 0; }, out);
      return;
    case SplitRule::NumberRuns:
      splitByMatches(
          s,
          [&](size_t p) {
            size_t n = 0;
            while (isNumber(s, p + n)) ++n;
            return n;
          },
          out);
      return;
    case SplitRule::PunctuationRuns:
      splitByMatches(
          s,
          [&](size_t p) {
            size_t n = 0;
            while (isPunctuationRunChar(s, p + n)) ++n;
            return n;
          },
          out);
      return;
    case SplitRule::AsciiDigitTriples:
      splitByMatches(
          s,
          [&](size_t p) -> size_t {
            return isAsciiDigit(s, p) && isAsciiDigit(s, p + 1) && isAsciiDigit(s, p + 2) ? 3 : 0;
          },
          out);
      return;
  }
}

}  // namespace

PreTokenizer PreTokenizer::forName(std::string_view pre) {
  for (const NamedSpec& spec : namedSpecs()) {
    for (std::string_view name : spec.names) {
      if (name == pre) {
        return PreTokenizer(PreTokenizerSpec{pre.empty() ? "default" : std::string(pre), spec.rules,
                                             spec.ignoreMerges});
      }
    }
  }
  std::string known;
  for (std::string_view name : supportedPreTokenizers()) {
    known += known.empty() ? "" : ", ";
    known += name;
  }
  throw Error("tokenizer.ggml.pre \"" + std::string(pre) +
              "\": pre-tokenizer not supported (supported: " + known + ")");
}

std::vector<size_t> PreTokenizer::split(std::span<const uint32_t> cpts) const {
  std::vector<CodepointFlags> flags(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i) flags[i] = unicode::codepointFlags(cpts[i]);

  std::vector<size_t> pieces;
  if (!cpts.empty()) pieces.push_back(cpts.size());
  std::vector<size_t> next;
  for (SplitRule rule : m_spec.rules) {
    next.clear();
    next.reserve(pieces.size() * 2);
    size_t begin = 0;
    for (size_t len : pieces) {
      applyRule(rule, Span{cpts.data(), flags.data(), begin, begin + len}, next);
      begin += len;
    }
    pieces.swap(next);
  }
  return pieces;
}

bool preTokenizerAddsBosByDefault(std::string_view pre) {
  static constexpr std::array<std::string_view, 11> kNames = {
      "llama3",   "llama-v3", "llama-bpe",    "falcon3", "falcon-h1", "pixtral",
      "midm-2.0", "lfm2",     "jina-v5-nano", "tekken",  "chameleon"};
  return std::find(kNames.begin(), kNames.end(), pre) != kNames.end();
}

std::vector<std::string_view> supportedPreTokenizers() {
  std::vector<std::string_view> names;
  for (const NamedSpec& spec : namedSpecs()) {
    for (std::string_view name : spec.names) {
      if (!name.empty()) names.push_back(name);
    }
  }
  return names;
}

}  // namespace shoal::model
