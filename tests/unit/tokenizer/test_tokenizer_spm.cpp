// SentencePiece ("llama") tokenization on a hand-built vocabulary whose results are worked out
// by hand below, following llama.cpp's algorithm: spaces become "▁" (U+2581), a "▁" is put in
// front of the text, then the adjacent pair whose concatenation is the token with the highest
// score merges first (ties: leftmost), until no adjacent pair forms a token; characters left
// without a token become <0xXX> byte tokens.

#include <QtTest>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/model/tokenizer.h"

using shoal::model::TokenAttr;
using shoal::model::TokenId;
using shoal::model::Tokenizer;
using shoal::model::Vocab;

namespace {

// Ids of the test vocabulary.
enum : TokenId {
  kUnk = 0,
  kBos = 1,
  kEos = 2,
  kByteC3 = 3,  // <0xC3>
  kByteA9 = 4,  // <0xA9>: with <0xC3>, the bytes of 'é'
  kMark = 5,    // ▁
  kH = 6,
  kE = 7,
  kL = 8,
  kO = 9,
  kW = 10,
  kR = 11,
  kD = 12,
  kHe = 13,      // he      -3
  kLl = 14,      // ll      -2
  kLlo = 15,     // llo     -1
  kMarkHe = 16,  // ▁he     -4
  kHello = 17,   // hello   -5
  kMarkW = 18,   // ▁w      -6
  kOr = 19,      // or      -4.5
  kLd = 20,      // ld      -7
};

const std::string kSpace = "\xE2\x96\x81";  // ▁

Vocab testVocab() {
  Vocab v;
  v.model = "llama";
  const auto add = [&](std::string text, TokenAttr attr, float score) {
    v.tokens.push_back(std::move(text));
    v.attrs.push_back(attr);
    v.scores.push_back(score);
  };
  add("<unk>", TokenAttr::Unknown, 0);
  add("<s>", TokenAttr::Control, 0);
  add("</s>", TokenAttr::Control, 0);
  add("<0xC3>", TokenAttr::Byte, 0);
  add("<0xA9>", TokenAttr::Byte, 0);
  for (const char* c : {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d"}) {
    add(c, TokenAttr::Normal, -10);
  }
  add("he", TokenAttr::Normal, -3);
  add("ll", TokenAttr::Normal, -2);
  add("llo", TokenAttr::Normal, -1);
  add(kSpace + "he", TokenAttr::Normal, -4);
  add("hello", TokenAttr::Normal, -5);
  add(kSpace + "w", TokenAttr::Normal, -6);
  add("or", TokenAttr::Normal, -4.5f);
  add("ld", TokenAttr::Normal, -7);
  v.bos = kBos;
  v.eos = kEos;
  v.unk = kUnk;
  v.addBos = true;
  v.addSpacePrefix = true;
  return v;
}

std::vector<TokenId> encode(const Vocab& v, const std::string& text, bool addSpecial = false,
                            bool parseSpecial = true) {
  return Tokenizer::create(v)->encode(text, addSpecial, parseSpecial);
}

using Ids = std::vector<TokenId>;

}  // namespace

class TestTokenizerSpm : public QObject {
  Q_OBJECT

 private slots:
  // "hello" -> "▁hello", symbols ▁ h e l l o. Pairs that are tokens: he (-3), ll (-2).
  //   ll (-2) merges:   ▁ h e ll o     new pairs: ell (no), llo (-1)
  //   llo (-1) merges:  ▁ h e llo      new pairs: ello (no)
  //   he (-3) merges:   ▁ he llo       new pairs: ▁he (-4), hello (-5)
  //   ▁he (-4) merges:  ▁he llo        new pairs: ▁hello (no); hello is stale (he is gone)
  void mergesHighestScoreFirst() { QCOMPARE(encode(testVocab(), "hello"), (Ids{kMarkHe, kLlo})); }

  // The same with ▁he scored -6, below hello (-5): after "▁ he llo", hello merges first and
  // leaves "▁ hello".
  void scoreDecidesBetweenCompetingMerges() {
    Vocab v = testVocab();
    v.scores[kMarkHe] = -6;
    QCOMPARE(encode(v, "hello"), (Ids{kMark, kHello}));
  }

  // "▁lll": the pairs l+l at positions 1-2 and 2-3 both score -2; the leftmost merges, and the
  // remaining "l" has no partner: ▁ ll l.
  void equalScoresMergeLeftmostFirst() {
    QCOMPARE(encode(testVocab(), "lll"), (Ids{kMark, kLl, kL}));
  }

  // "hello world" -> "▁hello▁world"; the second word: ▁ w o r l d, pairs ▁w (-6), or (-4.5),
  // ld (-7): or, then ▁w, then ld -> ▁w or ld. No token spans the "o▁" between the words.
  void spacesBecomeTheSpaceMark() {
    QCOMPARE(encode(testVocab(), "hello world"), (Ids{kMarkHe, kLlo, kMarkW, kOr, kLd}));
  }

  // Without the space prefix: h e l l o -> h e ll o -> h e llo -> he llo -> hello.
  void noSpacePrefixWhenTheVocabularySaysNot() {
    Vocab v = testVocab();
    v.addSpacePrefix = false;
    QCOMPARE(encode(v, "hello"), (Ids{kHello}));
  }

  // A special token counts as the start of text: the text after it gets the prefix again.
  void spacePrefixFollowsASpecialToken() {
    QCOMPARE(encode(testVocab(), "</s>hello"), (Ids{kEos, kMarkHe, kLlo}));
  }

  // 'é' (C3 A9) has no token: its bytes become <0xC3> <0xA9>; "▁h" is no token either.
  void charactersWithoutTokensFallBackToBytes() {
    QCOMPARE(encode(testVocab(), "h\xC3\xA9"), (Ids{kMark, kH, kByteC3, kByteA9}));
  }

  // '€' (E2 82 AC) has neither a token nor byte tokens: each byte becomes the unknown token.
  // (llama.cpp throws here; an unknown token is the useful answer.)
  void bytesWithoutByteTokensBecomeUnknown() {
    QCOMPARE(encode(testVocab(), "h\xE2\x82\xAC"), (Ids{kMark, kH, kUnk, kUnk, kUnk}));
  }

  void bytesWithoutAnyFallbackAreAnError() {
    Vocab v = testVocab();
    v.unk.reset();
    QVERIFY_THROWS_EXCEPTION(shoal::Error, encode(v, "\xE2\x82\xAC"));
  }

  void addSpecialAddsBosAndEosAsConfigured() {
    Vocab v = testVocab();
    QCOMPARE(encode(v, "hello", true), (Ids{kBos, kMarkHe, kLlo}));
    v.addEos = true;
    QCOMPARE(encode(v, "hello", true), (Ids{kBos, kMarkHe, kLlo, kEos}));
    QCOMPARE(encode(v, "", true), (Ids{kBos, kEos}));
    QCOMPARE(encode(v, ""), Ids{});
  }

  void tokenBytesUndoesSpaceMarkAndByteTokens() {
    const auto tok = Tokenizer::create(testVocab());
    QCOMPARE(tok->tokenBytes(kMarkHe), std::string(" he"));
    QCOMPARE(tok->tokenBytes(kByteC3), std::string("\xC3"));
    QCOMPARE(tok->tokenBytes(kBos), std::string());
    QCOMPARE(tok->tokenBytes(kBos, true), std::string("<s>"));
    QCOMPARE(tok->tokenBytes(kUnk), std::string());
    QCOMPARE(tok->tokenBytes(kUnk, true), std::string("<unk>"));
  }

  // decode drops one leading space of the first token, the one the encoder added; after a BOS
  // the space stays (llama.cpp's detokenize does the same).
  void decodeDropsTheEncoderSpace() {
    const auto tok = Tokenizer::create(testVocab());
    QCOMPARE(tok->decode({kMarkHe, kLlo}), std::string("hello"));
    QCOMPARE(tok->decode({kMark, kH, kByteC3, kByteA9}), std::string("h\xC3\xA9"));
    QCOMPARE(tok->decode({kBos, kMarkHe, kLlo}), std::string(" hello"));
    QCOMPARE(tok->decode(tok->encode("hello world", false, true)), std::string("hello world"));
  }

  void endOfGenerationIsEos() {
    const auto tok = Tokenizer::create(testVocab());
    QVERIFY(tok->isEndOfGeneration(kEos));
    QVERIFY(!tok->isEndOfGeneration(kBos));
  }
};

QTEST_APPLESS_MAIN(TestTokenizerSpm)
#include "test_tokenizer_spm.moc"
