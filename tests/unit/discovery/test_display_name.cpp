// Names from the network made safe to print (lan/discovery/display_name.h): what a beacon's name
// or a pairing peer's name can no longer do to a terminal or a log (issue 14 item 6).

#include <QtTest>
#include <string>

#include "lan/discovery/display_name.h"

using shoal::lan::sanitizeDisplayText;

class TestDisplayName : public QObject {
  Q_OBJECT

 private slots:
  void plainNamesAreKept() {
    QCOMPARE(sanitizeDisplayText("gpu-box 2"), std::string("gpu-box 2"));
    QCOMPARE(sanitizeDisplayText("Küche — RTX 3060"), std::string("Küche — RTX 3060"));
  }

  void terminalEscapesAreRemoved() {
    // Clear screen, set the title, colour: ESC and the 8-bit CSI go, the rest is inert text.
    QCOMPARE(sanitizeDisplayText("\x1b[2J\x1b]0;pwned\x07name\x1b[31m"),
             std::string("[2J]0;pwnedname[31m"));
    QCOMPARE(sanitizeDisplayText("a\xc2\x9b"
                                 "31mb"),
             std::string("a31mb"));
  }

  void newlinesCannotForgeASecondLogLine() {
    QCOMPARE(sanitizeDisplayText("node\nshoal-node: identity clash: fake"),
             std::string("node shoal-node: identity clash: fake"));
    QCOMPARE(sanitizeDisplayText("a\r\n\tb\xe2\x80\xa8"
                                 "c"),
             std::string("a b c"));
  }

  void bidiOverridesAreRemoved() {
    QCOMPARE(sanitizeDisplayText("abc\xe2\x80\xae"
                                 "fed\xe2\x81\xa6"
                                 "x"),
             std::string("abcfedx"));
  }

  void invalidUtf8BecomesReplacementCharacters() {
    QCOMPARE(sanitizeDisplayText("a\xff"
                                 "b"),
             std::string("a\xef\xbf\xbd"
                         "b"));
    QCOMPARE(sanitizeDisplayText("\xc0\xaf"), std::string("\xef\xbf\xbd\xef\xbf\xbd"));  // overlong
    QCOMPARE(sanitizeDisplayText("x\xe2\x82"), std::string("x\xef\xbf\xbd\xef\xbf\xbd"));
  }

  void nulBytesAreRemoved() {
    QCOMPARE(sanitizeDisplayText(std::string("ab\0cd", 5)), std::string("abcd"));
  }

  void spacesAreCollapsedAndTrimmed() {
    QCOMPARE(sanitizeDisplayText("  a   b  "), std::string("a b"));
    QCOMPARE(sanitizeDisplayText("\x1b\n\t"), std::string());
  }

  void lengthIsBoundedAtACharacterBoundary() {
    const std::string longName(1000, 'x');
    QCOMPARE(sanitizeDisplayText(longName).size(), shoal::lan::kMaxDisplayNameBytes);
    // "é" is two bytes: a cut at 3 bytes keeps one whole "é", never half of the second.
    QCOMPARE(sanitizeDisplayText("\xc3\xa9\xc3\xa9", 3), std::string("\xc3\xa9"));
  }
};

QTEST_GUILESS_MAIN(TestDisplayName)
#include "test_display_name.moc"
