// Utf8StreamDecoder: what a streaming callback sees when token bytes arrive piecemeal. It must
// never see part of a character, and it must always see valid UTF-8.

#include <QtTest>
#include <string>

#include "engine/model/tokenizer.h"

using shoal::model::Utf8StreamDecoder;

namespace {
const std::string kEmoji = "\xF0\x9F\x98\x80";    // U+1F600, four bytes
const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// a + b through append: GCC 12 reports a false -Wrestrict on some inlined operator+ forms.
std::string cat(std::string a, const std::string& b) { return a.append(b); }
}  // namespace

class TestUtf8StreamDecoder : public QObject {
  Q_OBJECT

 private slots:
  void asciiPassesStraightThrough() {
    Utf8StreamDecoder d;
    QCOMPARE(d.push("Hello"), std::string("Hello"));
    QCOMPARE(d.flush(), std::string());
  }

  // Byte-level BPE often splits an emoji over several tokens.
  void emojiSplitAcrossPushesComesOutWhole() {
    Utf8StreamDecoder d;
    QCOMPARE(d.push(cat("a", kEmoji.substr(0, 1))), std::string("a"));
    QCOMPARE(d.push(kEmoji.substr(1, 2)), std::string());
    QCOMPARE(d.push(cat(kEmoji.substr(3), "b")), cat(kEmoji, "b"));
    QCOMPARE(d.flush(), std::string());
  }

  void everySplitPointOfMixedTextGivesTheSameText() {
    const std::string text = std::string("caf\xC3\xA9 ") + kEmoji + " \xE2\x82\xAC!";
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      Utf8StreamDecoder d;
      std::string out = d.push(text.substr(0, cut));
      out += d.push(text.substr(cut));
      out += d.flush();
      QCOMPARE(out, text);
    }
  }

  void byteByBytePushesNeverEmitPartialCharacters() {
    const std::string text = std::string("\xC3\xA9") + kEmoji + "\xE2\x82\xAC";
    Utf8StreamDecoder d;
    std::string out;
    for (char c : text) {
      const std::string piece = d.push(std::string(1, c));
      // Each non-empty output is a whole character.
      QVERIFY(piece.empty() || piece == "\xC3\xA9" || piece == kEmoji || piece == "\xE2\x82\xAC");
      out += piece;
    }
    QCOMPARE(out, text);
  }

  // A byte that can never start or continue a character is replaced at once, not held back.
  void invalidBytesBecomeReplacementCharacters() {
    Utf8StreamDecoder d;
    QCOMPARE(d.push("a\xFF"
                    "b"),
             std::string("a") + kReplacement + "b");
    QCOMPARE(d.push("\x80"), kReplacement);                     // continuation without a lead
    QCOMPARE(d.push("\xC0\xAF"), kReplacement + kReplacement);  // overlong '/': C0 never valid
    QCOMPARE(d.push("\xED\xA0\x80"),  // surrogate D800: ED then A0 invalid
             kReplacement + kReplacement + kReplacement);
  }

  // A lead byte followed by something that cannot continue it: one U+FFFD for the cut-short
  // sequence, and the next byte is read on its own.
  void truncatedSequenceBeforeAnotherCharacter() {
    Utf8StreamDecoder d;
    QCOMPARE(d.push("\xE2\x82"
                    "A"),
             kReplacement + "A");
    QCOMPARE(d.push(std::string("\xF0\x9F") + kEmoji), kReplacement + kEmoji);
  }

  void flushReplacesAnIncompleteTail() {
    Utf8StreamDecoder d;
    QCOMPARE(d.push(cat("ok", kEmoji.substr(0, 3))), std::string("ok"));
    QCOMPARE(d.flush(), kReplacement);
    QCOMPARE(d.flush(), std::string());  // nothing left after a flush
    QCOMPARE(d.push("x"), std::string("x"));
  }
};

QTEST_APPLESS_MAIN(TestUtf8StreamDecoder)
#include "test_utf8_stream_decoder.moc"
