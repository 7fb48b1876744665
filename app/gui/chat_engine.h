#pragma once
// ChatEngine: the model, its chain of stages and the generation session, for the GUI.
//
// Threading contract
// ------------------
// - A ChatEngine lives on its own QThread (ChatEngineThread below creates both). Everything it
//   owns (model, backend, chain, session) is touched only on that thread.
// - The GUI talks to it only through queued signals and slots: loadModel() and generate() are
//   slots invoked with Qt::QueuedConnection (or through the queued requestGenerate()), and every
//   result comes back as a signal, delivered queued on the GUI thread. The GUI thread therefore
//   never waits on model loading or inference.
// - The two exceptions are stop() and requestGenerate(), which are safe to call from any thread:
//   stop() only sets an atomic flag that the session reads before every token (its cancel
//   pointer), so a reply ends within one token; requestGenerate() clears that flag and queues
//   generate(). The caller must not request a new reply before replyFinished (or
//   generateFailed) of the previous one: requests queue up, they do not preempt.
// - Slots run to completion one at a time (it is one thread), so a loadModel() queued behind a
//   generate() waits for it; stop() first to make that quick.

#include <QObject>
#include <QThread>
#include <atomic>
#include <memory>

#include "app/gui/chat_types.h"

namespace shoal::model {
class Model;
}
namespace shoal::runtime {
class Backend;
class Chain;
class Session;
}  // namespace shoal::runtime

namespace shoal::gui {

class ChatEngine : public QObject {
  Q_OBJECT

 public:
  explicit ChatEngine(QObject* parent = nullptr);
  ~ChatEngine() override;

  // Thread-safe: ask the running reply (if any) to stop before its next token.
  void stop();
  // Thread-safe: clear the stop flag and queue generate() on the engine thread.
  void requestGenerate(qint64 conversationId, const QList<ChatTurn>& turns,
                       const GenerationSettings& settings);

 public slots:
  // Load a GGUF file and build a one-stage CPU chain over all its layers; replaces the model
  // loaded before. Emits modelLoaded or loadFailed (the reason from the engine's error).
  void loadModel(const QString& path);
  // Render `turns` with the model's chat template, drop the oldest turns while the prompt plus
  // room for the reply does not fit the context (the system turn stays), and generate. Streams
  // tokenStreamed and ends with replyFinished (also when stopped) or generateFailed.
  void generate(qint64 conversationId, const QList<ChatTurn>& turns,
                const GenerationSettings& settings);

 signals:
  void loadStarted(const QString& path);
  // name: the file name; contextLength: tokens the chain holds; architecture: e.g. "llama".
  void modelLoaded(const QString& name, int contextLength, const QString& architecture);
  void loadFailed(const QString& reason);
  // Whole UTF-8 characters of the reply as they are produced.
  void tokenStreamed(qint64 conversationId, const QString& text);
  // The complete reply text (stop strings excluded) and its statistics.
  void replyFinished(qint64 conversationId, const QString& text,
                     const shoal::gui::ReplyStats& stats);
  // Nothing was generated: no model loaded, the message does not fit the context, bad settings.
  void generateFailed(qint64 conversationId, const QString& reason);

 private:
  std::unique_ptr<model::Model> m_model;
  std::unique_ptr<runtime::Backend> m_backend;
  std::unique_ptr<runtime::Chain> m_chain;
  std::unique_ptr<runtime::Session> m_session;
  std::atomic<bool> m_cancel{false};
};

// Owns a ChatEngine and the QThread it runs on. Destroying it stops a running reply, joins the
// thread (a reply then ends within one token; a model load runs to its end) and deletes the
// engine.
class ChatEngineThread {
 public:
  ChatEngineThread();
  ~ChatEngineThread();
  ChatEngineThread(const ChatEngineThread&) = delete;
  ChatEngineThread& operator=(const ChatEngineThread&) = delete;

  ChatEngine* engine() const { return m_engine; }

 private:
  QThread m_thread;
  ChatEngine* m_engine;  // owned; deleted after the thread has ended
};

}  // namespace shoal::gui
