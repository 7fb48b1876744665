#include "app/gui/chat_engine.h"

#include <QFileInfo>
#include <algorithm>
#include <cstdlib>
#include <exception>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/session.h"
#include "kernels/backend_registry.h"
#include "lan/api/api_server.h"

namespace shoal::gui {
namespace {

// A chain of one stage holding every layer of `m` on `device`, with the app's context cap and
// `sequences` KV slots. The chat and the API server each get one (each stage has its own KV
// cache).
std::unique_ptr<runtime::Chain> wholeModelChain(runtime::Backend& backend,
                                                const std::string& device, const model::Model& m,
                                                int32_t sequences = 1) {
  const model::ModelConfig& c = m.config();
  runtime::StageSpec spec;
  spec.firstLayer = 0;
  spec.lastLayer = c.nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength = std::min<int32_t>(c.nCtxTrain, kMaxChatContext);
  spec.maxSequences = sequences;
  const runtime::ModelSource src{&m.file(), &m.config(), &m.weights()};
  std::vector<std::unique_ptr<runtime::Stage>> stages;
  stages.push_back(backend.createStage(device, src, spec));
  return std::make_unique<runtime::Chain>(std::move(stages));
}

}  // namespace

ChatEngine::ChatEngine(QObject* parent) : ReplyEngine(parent) {}

// The API server first (it uses the model), then session before chain before backend before
// model.
ChatEngine::~ChatEngine() {
  blockSignals(true);  // the window is being torn down: nobody to tell
  stopApi();
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
  if (enabled && m_model) startApi();
}

void ChatEngine::startApi() {
  try {
    kernels::BackendOptions options;
    options.cpuThreads = m_threads;
    m_apiBackend = kernels::createBackend("cpu", options);
    m_apiChain =
        wholeModelChain(*m_apiBackend, m_apiBackend->devices().front().id, *m_model, kApiParallel);
    api::ApiServerOptions o;
    o.host = m_apiHost.toStdString();
    o.port = m_apiPort;
    // The key comes from the environment, as shoal-node's does (never stored in the settings
    // file); serving beyond loopback needs one, and bind() says so otherwise.
    if (const char* key = std::getenv("SHOAL_API_KEY")) o.apiKey = key;
    m_api = std::make_unique<api::ApiServer>(*m_model, *m_apiChain, o);
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
  m_apiChain.reset();
  m_apiBackend.reset();
  if (wasRunning) emit apiStopped();
}

void ChatEngine::loadModel(const QString& path) {
  emit loadStarted(path);
  // The API server serves the old model: stop it before the model goes.
  stopApi();
  // Release the old model first: two models at once may not fit in memory.
  m_session.reset();
  m_chain.reset();
  m_backend.reset();
  m_model.reset();
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
    if (device.empty()) device = backend->devices().front().id;
    auto chain = wholeModelChain(*backend, device, *loaded);
    m_session = std::make_unique<runtime::Session>(*chain, loaded->tokenizer());
    m_chain = std::move(chain);
    m_backend = std::move(backend);
    m_model = std::move(loaded);
  } catch (const std::exception& e) {
    m_session.reset();
    emit loadFailed(QString::fromStdString(e.what()));
    return;
  }
  emit modelLoaded(QFileInfo(path).fileName(), m_session->contextLength(),
                   QString::fromStdString(m_model->config().architecture));
  if (m_apiWanted) startApi();
}

ChatEngine::ReplyTarget ChatEngine::replyTarget() const {
  if (!m_session) return {nullptr, tr("No model is loaded."), 0, {}};
  return {m_model.get(), {}, m_session->contextLength(), tr("the context")};
}

runtime::GenerateResult ChatEngine::runReply(const std::vector<int32_t>& prompt,
                                             const runtime::GenerateOptions& options,
                                             const std::function<bool(std::string_view)>& onText) {
  return m_session->generate(prompt, options, onText);
}

}  // namespace shoal::gui
