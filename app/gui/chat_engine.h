#pragma once
// ChatEngine: the model, its chain of stages and the generation session, for the GUI.
//
// Threading contract
// ------------------
// - A ChatEngine lives on its own QThread (ChatEngineThread below creates both). What it owns
//   (model, backend, generation queue) is touched only on that thread, except the chain, which
//   belongs to the queue's worker.
// - It is a ReplyEngine (reply_engine.h): replies are requested with requestReply(), stopped with
//   stop() (both safe from any thread), and answered with ReplyEngine's signals.
// - Its other slots (loadModel, setCompute, setApiServer) are invoked queued
//   (QMetaObject::invokeMethod with a lambda, or a queued connection), and every result comes
//   back as a signal, delivered queued on the GUI thread. The GUI thread therefore never waits
//   on model loading or inference.
// - Slots run to completion one at a time (it is one thread), so a loadModel() queued behind a
//   reply waits for it; stop() first to make that quick.
// - One engine per process: the chat and the OpenAI-compatible API server (lan/api), when
//   enabled, generate through the same GenerationQueue — one chain on the chosen backend, one
//   copy of the weights, its worker thread running the continuous-batching scheduler. A chat
//   reply is a job like an API request; this thread waits for its pieces (and turns the stop
//   flag into the job's cancellation). With the API on, the chain holds 1 + kApiParallel KV
//   slots, otherwise one (a GPU reserves each slot's memory up front), so turning the API on
//   reloads the model's stage. The ApiServer's HTTP threads are its own; this object starts and
//   stops it on the engine thread, and stops it before the queue or model it uses goes.

#include <QObject>
#include <memory>
#include <thread>

#include "app/gui/chat_types.h"
#include "app/gui/reply_engine.h"
#include "app/gui/worker_thread.h"

namespace shoal::model {
class Model;
}
namespace shoal::runtime {
class Backend;
class Chain;
class ModelDrafter;
}  // namespace shoal::runtime
namespace shoal::api {
class ApiServer;
class GenerationQueue;
}  // namespace shoal::api

namespace shoal::gui {

// Replies with a chain of one stage on this computer: the model's chat template, the chain's
// context.
class ChatEngine : public ReplyEngine {
  Q_OBJECT

 public:
  explicit ChatEngine(QObject* parent = nullptr);
  ~ChatEngine() override;

 public slots:
  // Load a GGUF file and build a one-stage chain over all its layers on the preferred backend
  // (setCompute); replaces the model loaded before. Emits modelLoaded or loadFailed (the reason
  // from the engine's error). A preferred backend that is unavailable falls back to the CPU and
  // says why in notice().
  void loadModel(const QString& path);
  // Backend ("cpu", "vulkan", "cuda"), device id (empty: the backend's first) and CPU threads
  // (0: physical cores) for the next loadModel().
  void setCompute(const QString& backend, const QString& device, int threads);
  // The draft model for the next loadModel(): "auto", "none" or a GGUF path (AppSettings). A
  // draft model found or named is loaded on the CPU beside the model, with a KV slot for every
  // reply the queue runs at once, and the queue's scheduler drafts with it where prompt lookup
  // has nothing; one that cannot be used (unreadable, another vocabulary) is skipped with a
  // notice.
  void setDraftModel(const QString& choice);
  // Serve the API on host:port (port 0: any free one) over the loaded model, or stop serving.
  // Emits apiStarted (with the bound port), apiStopped or apiFailed. Enabled without a model,
  // it starts once one is loaded.
  void setApiServer(bool enabled, const QString& host, int port);

 signals:
  void loadStarted(const QString& path);
  // name: the file name; contextLength: tokens the chain holds; architecture: e.g. "llama".
  void modelLoaded(const QString& name, int contextLength, const QString& architecture);
  void loadFailed(const QString& reason);
  // Something the user should know that is not a failure (a backend fallback).
  void notice(const QString& text);
  void apiStarted(const QString& host, int port);
  void apiStopped();
  void apiFailed(const QString& reason);

 protected:
  ReplyTarget replyTarget() const override;
  runtime::GenerateResult runReply(const std::vector<int32_t>& prompt,
                                   const runtime::GenerateOptions& options,
                                   const std::function<bool(std::string_view)>& onText) override;

 private:
  void startApi();
  void stopApi();
  // Destroys the queue, the draft model, chain, backend and model (API stopped first), in that
  // order.
  void unload();
  // Loads the draft model setDraftModel() chose for the model just loaded from `modelPath`
  // (m_draft*), with `sequences` KV slots of `contextLength`; a notice says which, or why none
  // is used.
  void loadDrafter(const QString& modelPath, int32_t sequences, int32_t contextLength);

  std::unique_ptr<model::Model> m_model;
  QString m_modelPath;  // the loaded file, to reload it with more KV slots
  std::unique_ptr<runtime::Backend> m_backend;
  std::unique_ptr<runtime::Backend> m_cpuBackend;  // the CPU's layers when the GPU lacks memory
  std::unique_ptr<runtime::Chain> m_chain;         // used by m_queue's worker only
  std::unique_ptr<api::GenerationQueue> m_queue;   // the chat's and the API's generations
  QString m_backendName = "cpu";
  QString m_deviceId;
  int m_threads = 0;

  // Speculative decoding's draft model (loadDrafter), used by m_queue's worker only.
  QString m_draftChoice = "auto";
  std::unique_ptr<model::Model> m_draftModel;
  std::unique_ptr<runtime::Backend> m_draftBackend;
  std::unique_ptr<runtime::Chain> m_draftChain;
  std::unique_ptr<runtime::ModelDrafter> m_drafter;

  // The API server over m_queue.
  bool m_apiWanted = false;
  QString m_apiHost;
  int m_apiPort = 0;
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
