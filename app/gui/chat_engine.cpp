#include "app/gui/chat_engine.h"

#include <QFileInfo>
#include <QRandomGenerator>
#include <algorithm>
#include <cstdlib>
#include <exception>

#include "engine/error.h"
#include "engine/model/chat_prompt.h"
#include "engine/model/chat_template.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/session.h"
#include "kernels/backend_registry.h"
#include "lan/api/api_server.h"

namespace shoal::gui {
namespace {

std::vector<model::ChatMessage> toMessages(const QList<ChatTurn>& turns) {
  std::vector<model::ChatMessage> out;
  out.reserve(static_cast<size_t>(turns.size()));
  for (const ChatTurn& t : turns) out.push_back({t.role.toStdString(), t.content.toStdString()});
  return out;
}

}  // namespace

ChatEngine::ChatEngine(QObject* parent) : QObject(parent) {
  qRegisterMetaType<GenerationSettings>();
  qRegisterMetaType<ChatTurn>();
  qRegisterMetaType<QList<ChatTurn>>();
  qRegisterMetaType<ReplyStats>();
}

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
    const model::ModelConfig& c = m_model->config();
    kernels::BackendOptions options;
    options.cpuThreads = m_threads;
    m_apiBackend = kernels::createBackend("cpu", options);
    runtime::StageSpec spec;
    spec.firstLayer = 0;
    spec.lastLayer = c.nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = std::min<int32_t>(c.nCtxTrain, kMaxChatContext);
    const runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(m_apiBackend->createStage(m_apiBackend->devices().front().id, src, spec));
    m_apiChain = std::make_unique<runtime::Chain>(std::move(stages));
    m_apiSession = std::make_unique<runtime::Session>(*m_apiChain, m_model->tokenizer());
    api::ApiServerOptions o;
    o.host = m_apiHost.toStdString();
    o.port = m_apiPort;
    // The key comes from the environment, as shoal-node's does (never stored in the settings
    // file); serving beyond loopback needs one, and bind() says so otherwise.
    if (const char* key = std::getenv("SHOAL_API_KEY")) o.apiKey = key;
    m_api = std::make_unique<api::ApiServer>(*m_model, *m_apiSession, o);
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
  m_apiSession.reset();
  m_apiChain.reset();
  m_apiBackend.reset();
  if (wasRunning) emit apiStopped();
}

void ChatEngine::stop() { m_cancel.store(true); }

void ChatEngine::requestGenerate(qint64 conversationId, const QList<ChatTurn>& turns,
                                 const GenerationSettings& settings) {
  m_cancel.store(false);
  QMetaObject::invokeMethod(
      this, [this, conversationId, turns, settings] { generate(conversationId, turns, settings); },
      Qt::QueuedConnection);
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
    const model::ModelConfig& c = loaded->config();
    runtime::StageSpec spec;
    spec.firstLayer = 0;
    spec.lastLayer = c.nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = std::min<int32_t>(c.nCtxTrain, kMaxChatContext);
    const runtime::ModelSource src{&loaded->file(), &loaded->config(), &loaded->weights()};
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(backend->createStage(device, src, spec));
    auto chain = std::make_unique<runtime::Chain>(std::move(stages));
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

void ChatEngine::generate(qint64 conversationId, const QList<ChatTurn>& turns,
                          const GenerationSettings& settings) {
  if (!m_session) {
    emit generateFailed(conversationId, tr("No model is loaded."));
    return;
  }
  try {
    const model::ChatTemplate& tmpl = m_model->chatTemplate();
    std::vector<model::ChatMessage> messages = toMessages(turns);
    const int32_t ctx = m_session->contextLength();
    const model::ChatPrompt chat =
        model::buildChatPrompt(m_model->tokenizer(), tmpl, messages, ctx, settings.maxTokens);
    const std::vector<model::TokenId>& prompt = chat.tokens;
    const int dropped = chat.droppedTurns;
    if (!chat.fits) {
      emit generateFailed(conversationId, tr("The message (%1 tokens) does not fit the context of "
                                             "%2 tokens.")
                                              .arg(prompt.size())
                                              .arg(ctx));
      return;
    }

    runtime::GenerateOptions g;
    g.maxTokens = std::max(settings.maxTokens, 1);
    g.sampler.temperature = static_cast<float>(settings.temperature);
    g.sampler.topP = static_cast<float>(settings.topP);
    g.sampler.topK = settings.topK;
    g.sampler.seed = settings.seed >= 0 ? static_cast<uint64_t>(settings.seed)
                                        : QRandomGenerator::global()->generate64();
    g.stop = model::chatStopStrings(tmpl.format);
    g.cancel = &m_cancel;

    const runtime::GenerateResult r =
        m_session->generate(prompt, g, [this, conversationId](std::string_view piece) {
          emit tokenStreamed(conversationId,
                             QString::fromUtf8(piece.data(), static_cast<qsizetype>(piece.size())));
          return true;
        });

    ReplyStats s;
    s.promptTokens = r.promptTokens;
    s.generatedTokens = static_cast<int>(r.tokens.size());
    s.contextUsed = static_cast<int>(m_session->cachedTokens().size());
    s.contextLength = ctx;
    s.droppedTurns = dropped;
    // The first token comes out of the prefill; decodeSeconds covers the ones after it.
    s.tokensPerSecond = (r.tokens.size() > 1 && r.decodeSeconds > 0)
                            ? static_cast<double>(r.tokens.size() - 1) / r.decodeSeconds
                            : 0.0;
    s.prefillSeconds = r.prefillSeconds;
    s.finishReason =
        QString::fromUtf8(runtime::finishReasonName(r.finish).data(),
                          static_cast<qsizetype>(runtime::finishReasonName(r.finish).size()));
    emit replyFinished(conversationId, QString::fromStdString(r.text), s);
  } catch (const std::exception& e) {
    emit generateFailed(conversationId, QString::fromStdString(e.what()));
  }
}

}  // namespace shoal::gui
