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
// - The OpenAI-compatible API server (lan/api), when enabled, serves the same loaded model
//   through its own chain and session (a second stage with its own KV cache, on its own backend
//   instance and thread pool), so API requests never touch the chat's session. Its HTTP and
//   worker threads belong to the ApiServer; this object starts and stops it on the engine
//   thread, and stops it before the model it uses is replaced.

#include <QObject>
#include <atomic>
#include <memory>
#include <thread>

#include "app/gui/chat_types.h"
#include "app/gui/worker_thread.h"

namespace shoal::model {
class Model;
}
namespace shoal::runtime {
class Backend;
class Chain;
class Session;
}  // namespace shoal::runtime
namespace shoal::api {
class ApiServer;
}

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
  // Load a GGUF file and build a one-stage chain over all its layers on the preferred backend
  // (setCompute); replaces the model loaded before. Emits modelLoaded or loadFailed (the reason
  // from the engine's error). A preferred backend that is unavailable falls back to the CPU and
  // says why in notice().
  void loadModel(const QString& path);
  // Backend ("cpu", "vulkan", "cuda"), device id (empty: the backend's first) and CPU threads
  // (0: physical cores) for the next loadModel().
  void setCompute(const QString& backend, const QString& device, int threads);
  // Serve the API on host:port (port 0: any free one) over the loaded model, or stop serving.
  // Emits apiStarted (with the bound port), apiStopped or apiFailed. Enabled without a model,
  // it starts once one is loaded.
  void setApiServer(bool enabled, const QString& host, int port);
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
  // Something the user should know that is not a failure (a backend fallback).
  void notice(const QString& text);
  void apiStarted(const QString& host, int port);
  void apiStopped();
  void apiFailed(const QString& reason);

 private:
  void startApi();
  void stopApi();

  std::unique_ptr<model::Model> m_model;
  std::unique_ptr<runtime::Backend> m_backend;
  std::unique_ptr<runtime::Chain> m_chain;
  std::unique_ptr<runtime::Session> m_session;
  std::atomic<bool> m_cancel{false};
  QString m_backendName = "cpu";
  QString m_deviceId;
  int m_threads = 0;

  // The API server and what it owns (destroyed in reverse order by stopApi()).
  bool m_apiWanted = false;
  QString m_apiHost;
  int m_apiPort = 0;
  std::unique_ptr<runtime::Backend> m_apiBackend;
  std::unique_ptr<runtime::Chain> m_apiChain;
  std::unique_ptr<runtime::Session> m_apiSession;
  std::unique_ptr<api::ApiServer> m_api;
  std::thread m_apiThread;  // runs m_api->serve()
};

// Owns a ChatEngine and the QThread it runs on. Destroying it stops a running reply, joins the
// thread (a reply then ends within one token; a model load runs to its end) and deletes the
// engine.
class ChatEngineThread : public WorkerThread<ChatEngine> {
 public:
  ChatEngineThread() : WorkerThread("shoal-chat-engine") {}
  ChatEngine* engine() const { return worker(); }
};

}  // namespace shoal::gui
