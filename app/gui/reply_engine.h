#pragma once
// ReplyEngine: what the chat window asks for a reply, wherever the reply runs. ChatEngine (a
// chain on this computer, chat_engine.h) and PoolController (the LAN pool's chain,
// pool_controller.h) are ReplyEngines; the window sends each request to the one the "Run on" box
// picks and handles the answers the same way, whichever it is.
//
// Threading contract (the house rule of worker_thread.h)
// ------------------------------------------------------
// - A ReplyEngine lives on its own QThread. A reply is generated there; the GUI thread never
//   waits for it. Every answer is a signal, delivered queued to receivers on the GUI thread.
// - requestReply() and stop() are safe to call from any thread. stop() sets the atomic flag the
//   running reply reads before every token (its cancel pointer), so the reply ends within one
//   token with finish reason "cancelled"; requestReply() clears that flag and queues the reply
//   on the engine's thread. Do not request a reply before the previous one has ended
//   (replyFinished or generateFailed): requests queue up, they do not preempt.
//
// What every reply shares lives here, once: the conversation rendered with the model's chat
// template, the context policy (engine/model/chat_prompt.h: room for the reply, the oldest turns
// dropped while the prompt does not fit), the sampling options from the conversation's settings,
// and the statistics of the result. A subclass says what it replies with (replyTarget) and runs
// the prompt through its runtime::Session (runReply).

#include <QObject>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "app/gui/chat_types.h"

namespace shoal::model {
class Model;
}
namespace shoal::runtime {
struct GenerateOptions;
struct GenerateResult;
}  // namespace shoal::runtime

namespace shoal::gui {

class ReplyEngine : public QObject {
  Q_OBJECT

 public:
  explicit ReplyEngine(QObject* parent = nullptr);

  // Thread-safe: ask the running reply (if any) to stop before its next token.
  void stop();
  // Thread-safe: clear the stop flag and queue a reply to `turns` on the engine's thread. Streams
  // tokenStreamed and ends with replyFinished (also when stopped) or generateFailed.
  void requestReply(qint64 conversationId, const QList<shoal::gui::ChatTurn>& turns,
                    const shoal::gui::GenerationSettings& settings);

 signals:
  // Whole UTF-8 characters of the reply as they are produced.
  void tokenStreamed(qint64 conversationId, const QString& text);
  // The complete reply text (stop strings excluded) and its statistics.
  void replyFinished(qint64 conversationId, const QString& text,
                     const shoal::gui::ReplyStats& stats);
  // Nothing was generated: no model to reply with, the message does not fit the context, an
  // error of the engine (the reason says which).
  void generateFailed(qint64 conversationId, const QString& reason);

 protected:
  // What a reply would run on now; called on the engine's thread.
  struct ReplyTarget {
    const model::Model* model = nullptr;  // tokenizer and chat template; null: none (see below)
    QString unavailable;                  // why there is no model, for the person
    int32_t contextLength = 0;            // tokens the chain holds
    QString contextName;  // names that context in a message, e.g. "the pool's context"
  };
  virtual ReplyTarget replyTarget() const = 0;
  // Generates the reply to `prompt` (options.cancel is the stop flag), streaming through onText.
  // Called on the engine's thread; throws what the generation throws.
  virtual runtime::GenerateResult runReply(const std::vector<int32_t>& prompt,
                                           const runtime::GenerateOptions& options,
                                           const std::function<bool(std::string_view)>& onText) = 0;

 private:
  // On the engine's thread: the shared part of a reply around replyTarget() and runReply().
  void generate(qint64 conversationId, const QList<ChatTurn>& turns,
                const GenerationSettings& settings);

  std::atomic<bool> m_cancel{false};
};

}  // namespace shoal::gui
