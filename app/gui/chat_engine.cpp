#include "app/gui/chat_engine.h"

#include <QFileInfo>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/draft_model_choice.h"
#include "engine/runtime/local_chain.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/session.h"
#include "kernels/backend_registry.h"
#include "lan/api/api_server.h"
#include "lan/api/generation_queue.h"

namespace shoal::gui {
namespace {

// A chain of one stage holding every layer of `m` on `device`, with the app's context cap and
// `sequences` KV slots (the chat's and, with the API on, the API's requests).
// The one-stage spec of the whole model for `sequences` conversations.
runtime::StageSpec wholeModelSpec(const model::Model& m, int32_t sequences) {
  const model::ModelConfig& c = m.config();
  runtime::StageSpec spec;
  spec.firstLayer = 0;
  spec.lastLayer = c.nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength = std::min<int32_t>(c.nCtxTrain, kMaxChatContext);
  spec.maxSequences = sequences;
  return spec;
}

}  // namespace

ChatEngine::ChatEngine(QObject* parent) : ReplyEngine(parent) {}

// The API server first (it uses the queue), then the queue (its worker uses the chain) before
// chain before backend before model.
ChatEngine::~ChatEngine() {
  blockSignals(true);  // the window is being torn down: nobody to tell
  unload();
}

void ChatEngine::setCompute(const QString& backend, const QString& device, int threads) {
  m_backendName = backend.isEmpty() ? QStringLiteral("cpu") : backend;
  m_deviceId = device;
  m_threads = threads;
}

void ChatEngine::setApiServer(bool enabled, const QString& host, int port) {
  stopApi();
  m_apiWanted = enabled;
  m_apiHost = host;
  m_apiPort = port;
  if (!enabled || !m_model) return;
  // The chain was made with one KV slot (the chat's): reload it with room for the API's requests.
  if (m_queue && m_queue->slotCount() < static_cast<size_t>(1 + kApiParallel)) {
    loadModel(m_modelPath);  // starts the API once loaded
    return;
  }
  startApi();
}

void ChatEngine::startApi() {
  try {
    if (!m_queue) throw Error("no model is loaded");
    api::ApiServerOptions o;
    o.host = m_apiHost.toStdString();
    o.port = m_apiPort;
    o.maxQueued = m_queue->maxWaiting();
    // The key comes from the environment, as shoal-node's does (never stored in the settings
    // file); serving beyond loopback needs one, and bind() says so otherwise.
    if (const char* key = std::getenv("SHOAL_API_KEY")) o.apiKey = key;
    m_api = std::make_unique<api::ApiServer>(*m_model, *m_queue, o);
    m_api->bind();
  } catch (const std::exception& e) {
    stopApi();
    emit apiFailed(QString::fromStdString(e.what()));
    return;
  }
  api::ApiServer* server = m_api.get();
  m_apiThread = std::thread([server] { server->serve(); });
  emit apiStarted(m_apiHost, m_api->port());
}

void ChatEngine::stopApi() {
  const bool wasRunning = m_api != nullptr;
  if (m_api) m_api->stop();
  if (m_apiThread.joinable()) m_apiThread.join();
  m_api.reset();
  if (wasRunning) emit apiStopped();
}

void ChatEngine::unload() {
  stopApi();
  m_queue.reset();  // joins its worker: nothing touches the chain after this
  m_drafter.reset();
  m_draftChain.reset();
  m_draftBackend.reset();
  m_draftModel.reset();
  m_chain.reset();
  m_backend.reset();
  m_cpuBackend.reset();
  m_model.reset();
}

void ChatEngine::loadModel(const QString& path) {
  emit loadStarted(path);
  // The API server serves the old model: stop it before the model goes. Release the old model
  // first: two models at once may not fit in memory.
  unload();
  try {
    auto loaded = model::Model::load(path.toStdString());
    kernels::BackendOptions options;
    options.cpuThreads = m_threads;
    std::unique_ptr<runtime::Backend> backend =
        kernels::createBackend(m_backendName.toStdString(), options);
    std::string device = m_deviceId.toStdString();
    if (const runtime::Availability a = backend->availability(); !a.available) {
      if (m_backendName == "cpu") throw Error("cpu backend unavailable: " + a.reason);
      emit notice(tr("The %1 backend is unavailable (%2); running on the CPU.")
                      .arg(m_backendName, QString::fromStdString(a.reason)));
      backend = kernels::createBackend("cpu", options);
      device.clear();
    }
    // Members first, the queue last: its worker uses the chain, the chain the backend and model,
    // and unload() takes them down in the reverse order whatever threw.
    m_model = std::move(loaded);
    m_backend = std::move(backend);
    // A model larger than the GPU's free memory: the layers that fit on it (and on the machine's
    // other GPUs of that kind, unless a device was picked), the rest on the CPU.
    const runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    const runtime::StageSpec spec = wholeModelSpec(*m_model, m_apiWanted ? 1 + kApiParallel : 1);
    const runtime::LocalSplit split = runtime::planLocalSplit(
        *m_backend, runtime::chainDevices(*m_backend, device), src, spec, -1);
    if (split.needsCpu()) m_cpuBackend = kernels::createBackend("cpu", options);
    if (const std::string line = split.describe(spec.lastLayer); !line.empty()) {
      emit notice(tr("The model does not fit one GPU's free memory: %1.")
                      .arg(QString::fromStdString(line)));
    }
    m_chain = runtime::buildLocalChain(*m_backend, m_cpuBackend.get(), src, spec, split);
    loadDrafter(path, spec.maxSequences, spec.contextLength);
    runtime::SchedulerOptions schedule;
    schedule.drafter = m_drafter.get();
    m_queue = std::make_unique<api::GenerationQueue>(*m_chain, m_model->tokenizer(),
                                                     api::kMaxQueuedRequests, schedule);
    m_modelPath = path;
  } catch (const std::exception& e) {
    unload();
    emit loadFailed(QString::fromStdString(e.what()));
    return;
  }
  emit modelLoaded(QFileInfo(path).fileName(), m_queue->contextLength(),
                   QString::fromStdString(m_model->config().architecture));
  if (m_apiWanted) startApi();
}

void ChatEngine::setDraftModel(const QString& choice) { m_draftChoice = choice; }

void ChatEngine::loadDrafter(const QString& modelPath, int32_t sequences, int32_t contextLength) {
  std::filesystem::path path;
  try {
    path = runtime::chooseDraftModel(m_draftChoice.toStdString(), modelPath.toStdString(),
                                     m_model->tokenizer());
    if (path.empty()) return;
    auto draft = model::Model::load(path);
    const std::string why =
        runtime::draftVocabularyMismatch(m_model->tokenizer(), draft->tokenizer());
    if (!why.empty()) throw Error("it cannot draft for this model: " + why);
    kernels::BackendOptions options;
    options.cpuThreads = m_threads;
    auto cpu = kernels::createBackend("cpu", options);
    runtime::StageSpec spec = wholeModelSpec(*draft, sequences);
    spec.contextLength = contextLength;  // it drafts over the whole of a reply's history
    const runtime::ModelSource src{&draft->file(), &draft->config(), &draft->weights()};
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(cpu->createStage(cpu->devices().front().id, src, spec));
    auto chain = std::make_unique<runtime::Chain>(std::move(stages));
    m_drafter = std::make_unique<runtime::ModelDrafter>(*chain);
    m_draftChain = std::move(chain);
    m_draftBackend = std::move(cpu);
    m_draftModel = std::move(draft);
  } catch (const std::exception& e) {
    m_drafter.reset();
    m_draftChain.reset();
    m_draftBackend.reset();
    m_draftModel.reset();
    emit notice(tr("The draft model %1 is not used: %2")
                    .arg(QString::fromStdString(path.filename().string()),
                         QString::fromStdString(e.what())));
    return;
  }
  emit notice(tr("Drafting with %1 (speculative decoding: the replies stay the same).")
                  .arg(QString::fromStdString(path.filename().string())));
}

ChatEngine::ReplyTarget ChatEngine::replyTarget() const {
  if (!m_queue) return {nullptr, tr("No model is loaded."), 0, {}};
  return {m_model.get(), {}, m_queue->contextLength(), tr("the context")};
}

// A chat reply is a job on the shared queue, batched with whatever the API is generating.
runtime::GenerateResult ChatEngine::runReply(const std::vector<int32_t>& prompt,
                                             const runtime::GenerateOptions& options,
                                             const std::function<bool(std::string_view)>& onText) {
  if (!m_queue) throw Error("no model is loaded");
  auto job = std::make_shared<api::GenerationJob>(prompt, options);
  switch (m_queue->submit(job)) {
    case api::GenerationQueue::Submit::Accepted:
      break;
    case api::GenerationQueue::Submit::Full:
      throw Error("the model is busy with " + std::to_string(m_queue->maxWaiting()) +
                  " waiting API requests; try again in a moment");
    case api::GenerationQueue::Submit::ShuttingDown:
    case api::GenerationQueue::Submit::Unavailable:  // a router's answer, not one queue's
      throw Error("the model is being unloaded");
  }
  // The stop flag is read here, between pieces, and handed on as the job's cancellation.
  constexpr std::chrono::milliseconds kPoll{20};
  std::string text;
  for (;;) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed)) job->cancel();
    const api::GenerationJob::Event ev = job->next(text, kPoll);
    if (ev == api::GenerationJob::Event::Finished) break;
    if (ev == api::GenerationJob::Event::Text && onText && !onText(text)) job->cancel();
  }
  if (!job->error().empty()) throw Error(job->error());
  return job->result();
}

}  // namespace shoal::gui
