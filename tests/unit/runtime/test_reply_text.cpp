// ReplyText: the pool's streamed reply has Session's semantics: whole UTF-8 characters only,
// stop strings held back until they can no longer match, nothing after a stop string.

#include <QtTest>
#include <filesystem>

#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "engine/runtime/reply_text.h"

using namespace shoal;
using shoal::runtime::ReplyText;

namespace {

struct Streamed {
  std::vector<std::string> pieces;  // one per token pushed
  std::string text;
  bool stopped = false;
};

Streamed stream(const model::Tokenizer& tok, const std::string& text,
                std::vector<std::string> stops) {
  ReplyText reply(tok, std::move(stops));
  Streamed s;
  for (model::TokenId t : tok.encode(text, false, false)) {
    bool stopped = false;
    s.pieces.push_back(reply.push(t, stopped));
    s.text += s.pieces.back();
    if (stopped) {
      s.stopped = true;
      return s;
    }
  }
  s.text += reply.finish(s.stopped);
  return s;
}

}  // namespace

class TestReplyText : public QObject {
  Q_OBJECT
  std::unique_ptr<model::Model> m_model;

 private slots:
  void initTestCase() {
    std::string path = std::string(SHOAL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) path = model::defaultModelPath();
    if (!std::filesystem::exists(path)) QSKIP("default model absent (run scripts/setup)");
    m_model = model::Model::load(path);
  }

  void characterSplitOverTokensComesOutWhole() {
    const model::Tokenizer& tok = m_model->tokenizer();
    const std::string emoji = "\xF0\x9F\xA6\x8A";         // U+1F98A, four bytes
    QVERIFY(tok.encode(emoji, false, false).size() > 1);  // split over byte tokens
    const Streamed s = stream(tok, emoji, {});
    QCOMPARE(s.text, emoji);
    for (const std::string& piece : s.pieces) QVERIFY(piece.empty() || piece == emoji);
  }

  void stopStringEndsTheTextBeforeIt() {
    const Streamed s = stream(m_model->tokenizer(), "Hello world, said the cat.", {"said"});
    QVERIFY(s.stopped);
    QCOMPARE(s.text, std::string("Hello world, "));
  }

  void possibleStopPrefixIsReleasedOnceItCannotMatch() {
    const Streamed s = stream(m_model->tokenizer(), "Hello world, friend", {"worldwide"});
    QVERIFY(!s.stopped);
    QCOMPARE(s.text, std::string("Hello world, friend"));
  }

  void stopStringEndingTheReplyIsRemoved() {
    const Streamed s = stream(m_model->tokenizer(), "one two three", {"three"});
    QVERIFY(s.stopped);
    QCOMPARE(s.text, std::string("one two "));
  }
};

QTEST_GUILESS_MAIN(TestReplyText)
#include "test_reply_text.moc"
