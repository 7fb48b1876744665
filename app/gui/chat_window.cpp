#include "app/gui/chat_window.h"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QDesktopServices>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QScrollBar>
#include <QShortcut>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTabWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <utility>

#include "app/gui/chat_input.h"
#include "app/gui/model_manager.h"
#include "app/gui/models_page.h"
#include "app/gui/pool_controller.h"
#include "app/gui/pool_setup_panel.h"
#include "app/gui/pool_view.h"
#include "app/gui/settings_dialog.h"
#include "app/gui/settings_panel.h"
#include "app/gui/transcript_markdown.h"
#include "app/gui/welcome_page.h"

namespace shoal::gui {
namespace {

constexpr int kIdRole = Qt::UserRole;
constexpr int kTitleChars = 40;        // a new conversation is named after its first message
constexpr int kRenderIntervalMs = 50;  // at most ~20 transcript repaints a second while streaming
constexpr int kStatusMs = 8000;
// How often the reply being generated is saved: what a crash can lose, against one small write
// (and fsync) per interval on the GUI thread.
constexpr int kPartialSaveMs = 1000;
// The routes of "Run on", by their index in the box.
constexpr size_t kThisComputer = 0;
constexpr size_t kPool = 1;

QString defaultTitle() { return QObject::tr("New chat"); }

QString titleFrom(const QString& text) {
  QString t = text.simplified();
  if (t.size() > kTitleChars) t = t.left(kTitleChars - 1) + QStringLiteral("…");
  return t.isEmpty() ? defaultTitle() : t;
}

}  // namespace

ChatWindow::ChatWindow(const QString& modelPath, const QString& dataDirectory, QWidget* parent)
    : QMainWindow(parent),
      m_appSettings(AppSettings::load()),
      m_store(std::make_unique<ChatStore>(dataDirectory)),
      m_engineThread(std::make_unique<ChatEngineThread>()),
      m_poolThread(std::make_unique<PoolControllerThread>()),
      m_dataDirectory(dataDirectory) {
  setWindowTitle(tr("Shoal"));
  setWindowIcon(QIcon(QStringLiteral(":/icons/shoal.svg")));
  m_routes[kThisComputer].engine = engine();
  m_routes[kPool].engine = poolController();
  buildUi();
  connectEngine();
  connectPool();
  if (!m_store->ok()) showBanner(tr("Conversations cannot be saved: %1").arg(m_store->error()));
  reloadConversationList();
  const QList<StoredConversation> all = m_store->conversations();
  if (!all.isEmpty()) selectConversation(all.front().id);
  updateActions();
  pushEngineSettings();  // queued before the load, so the load uses them
  const QString modelsDir = m_appSettings.effectiveModelsDir();
  const bool noModel = !QFileInfo(modelPath).isFile() &&
                       QDir(modelsDir).entryList({QStringLiteral("*.gguf")}, QDir::Files).isEmpty();
  if (noModel) {
    showWelcome();  // a first run: offer a model rather than report a missing one
  } else {
    loadModel(modelPath);
  }
}

void ChatWindow::showWelcome() {
  if (!m_welcome) {
    m_welcome = new WelcomePage(m_appSettings.effectiveModelsDir());
    m_welcome->setObjectName("welcomePage");
    m_stack->addWidget(m_welcome);
    connect(m_welcome, &WelcomePage::findModelRequested, this, [this] { showPage("discover"); });
    connect(m_welcome, &WelcomePage::modelReady, this, [this](const QString& path) {
      m_models->refreshAndSelect(QFileInfo(path).fileName());
      loadModel(path);
      showPage("chat");
    });
  }
  m_modelStatus->setText(tr("No model"));
  m_stack->setCurrentWidget(m_welcome);
}

bool ChatWindow::isWelcomeShown() const {
  return m_welcome && m_stack->currentWidget() == m_welcome;
}

ChatWindow::~ChatWindow() {
  // Join the engine and the pool first: no signal of theirs may arrive while the widgets are
  // torn down.
  m_engineThread.reset();
  m_poolThread.reset();
}

void ChatWindow::buildUi() {
  // Left: conversations.
  auto* left = new QWidget;
  auto* leftLayout = new QVBoxLayout(left);
  m_search = new QLineEdit;
  m_search->setObjectName("searchBox");
  m_search->setPlaceholderText(tr("Search conversations"));
  m_search->setClearButtonEnabled(true);
  m_conversationList = new QListWidget;
  m_conversationList->setObjectName("conversationList");
  m_conversationList->setEditTriggers(QAbstractItemView::EditKeyPressed |
                                      QAbstractItemView::DoubleClicked);
  auto* listButtons = new QHBoxLayout;
  m_newChat = new QPushButton(tr("New"));
  m_newChat->setObjectName("newChatButton");
  m_rename = new QPushButton(tr("Rename"));
  m_rename->setObjectName("renameButton");
  m_delete = new QPushButton(tr("Delete"));
  m_delete->setObjectName("deleteButton");
  listButtons->addWidget(m_newChat);
  listButtons->addWidget(m_rename);
  listButtons->addWidget(m_delete);
  leftLayout->addWidget(m_search);
  leftLayout->addWidget(m_conversationList, 1);
  leftLayout->addLayout(listButtons);

  // Middle: banner, transcript, input, buttons.
  auto* middle = new QWidget;
  auto* midLayout = new QVBoxLayout(middle);
  m_banner = new QLabel;
  m_banner->setObjectName("banner");
  m_banner->setWordWrap(true);
  m_banner->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_banner->setStyleSheet(
      "QLabel { background: #fdecea; color: #611a15; border: 1px solid #f5c2c0; padding: 8px; }");
  m_banner->hide();
  m_transcript = new QTextBrowser;
  m_transcript->setObjectName("transcript");
  // Links open in the browser, except the reasoning toggles (transcript_markdown.h).
  m_transcript->setOpenLinks(false);
  connect(m_transcript, &QTextBrowser::anchorClicked, this, [this](const QUrl& link) {
    qint64 id = 0;
    if (!reasoningLinkTarget(link, id)) {
      QDesktopServices::openUrl(link);
      return;
    }
    if (!m_expandedReasoning.remove(id)) m_expandedReasoning.insert(id);
    renderTranscript();
  });
  m_input = new ChatInput;
  m_input->setObjectName("input");
  m_input->setMaximumHeight(110);
  auto* buttons = new QHBoxLayout;
  m_send = new QPushButton(tr("Send"));
  m_send->setObjectName("sendButton");
  m_stop = new QPushButton(tr("Stop"));
  m_stop->setObjectName("stopButton");
  m_regenerate = new QPushButton(tr("Regenerate"));
  m_regenerate->setObjectName("regenerateButton");
  m_copy = new QPushButton(tr("Copy"));
  m_copy->setObjectName("copyButton");
  buttons->addWidget(m_copy);
  buttons->addWidget(m_regenerate);
  buttons->addStretch(1);
  m_runOn = new QComboBox;
  m_runOn->setObjectName("runOn");
  m_runOn->addItems({tr("Run on: This computer"), tr("Run on: Pool")});
  m_runOn->setVisible(false);  // until a pool is deployed
  buttons->addWidget(m_runOn);
  buttons->addWidget(m_stop);
  buttons->addWidget(m_send);
  midLayout->addWidget(m_banner);
  midLayout->addWidget(m_transcript, 1);
  midLayout->addWidget(m_input);
  midLayout->addLayout(buttons);

  // Right: per-conversation settings.
  m_settings = new SettingsPanel;
  m_settings->setObjectName("settingsPanel");

  auto* splitter = new QSplitter;
  splitter->addWidget(left);
  splitter->addWidget(middle);
  splitter->addWidget(m_settings);
  splitter->setStretchFactor(1, 1);
  splitter->setSizes({220, 640, 240});

  m_modelsPage =
      new ModelsPage(m_appSettings.effectiveModelsDir(),
                     QDir(PoolController::configDirOf(m_dataDirectory)).filePath("node"),
                     // The pool controller lives as long as the window's pages do (~ChatWindow).
                     [c = poolController()] { return c->currentPool(); });
  m_models = m_modelsPage->local();
  m_pages = new QTabWidget;
  m_pages->setObjectName("pages");
  m_pages->setDocumentMode(true);
  m_pages->addTab(splitter, tr("Chat"));
  m_pages->addTab(m_modelsPage, tr("Models"));
  m_pool = new PoolView;
  m_pool->setObjectName("poolView");
  m_pages->addTab(m_pool, tr("Devices && pool"));
  connect(m_pages, &QTabWidget::currentChanged, this, [this] {
    // Probing backends loads GPU drivers: only when someone looks.
    if (m_pages->currentWidget() == m_pool && !m_localDevicesListed) {
      m_localDevicesListed = true;
      m_pool->setLocalBackends(probeBackends());
    }
    // The pool opens a listener and announces itself on the LAN: only once someone looks.
    if (m_pages->currentWidget() == m_pool) startPool();
  });
  m_stack = new QStackedWidget;
  m_stack->addWidget(m_pages);
  setCentralWidget(m_stack);
  connect(m_models, &ModelManager::loadRequested, this, &ChatWindow::loadModel);
  resize(1100, 720);

  m_modelStatus = new QLabel;
  m_modelStatus->setObjectName("modelStatus");
  m_apiLabel = new QLabel;
  m_apiLabel->setObjectName("apiLabel");
  m_apiLabel->hide();
  statusBar()->addPermanentWidget(m_apiLabel);
  statusBar()->addPermanentWidget(m_modelStatus);

  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open model…"));
  connect(open, &QAction::triggered, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open a GGUF model"), QString(),
                                                      tr("GGUF models (*.gguf);;All files (*)"));
    if (!path.isEmpty()) loadModel(path);
  });
  QAction* newChat = file->addAction(tr("&New chat"));
  newChat->setShortcut(QKeySequence::New);
  connect(newChat, &QAction::triggered, this, &ChatWindow::newConversation);
  addAction(newChat);  // the shortcut works while the menu bar is hidden too
  QAction* settings = file->addAction(tr("&Settings…"));
  settings->setShortcut(QKeySequence::Preferences);
  connect(settings, &QAction::triggered, this, &ChatWindow::openSettings);
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"));
  quit->setShortcut(QKeySequence::Quit);
  connect(quit, &QAction::triggered, this, &QWidget::close);

  // Esc stops from anywhere in the window, not only from the input box.
  auto* esc = new QShortcut(QKeySequence(Qt::Key_Escape), this);
  connect(esc, &QShortcut::activated, this, &ChatWindow::stopReply);

  m_renderTimer = new QTimer(this);
  m_renderTimer->setSingleShot(true);
  m_renderTimer->setInterval(kRenderIntervalMs);
  connect(m_renderTimer, &QTimer::timeout, this, &ChatWindow::renderTranscript);
  m_partialTimer = new QTimer(this);
  m_partialTimer->setSingleShot(true);
  m_partialTimer->setInterval(kPartialSaveMs);
  connect(m_partialTimer, &QTimer::timeout, this, &ChatWindow::savePartialReply);

  connect(m_input, &ChatInput::sendRequested, this, &ChatWindow::sendMessage);
  connect(m_input, &ChatInput::stopRequested, this, &ChatWindow::stopReply);
  connect(m_input, &QPlainTextEdit::textChanged, this, &ChatWindow::updateActions);
  connect(m_send, &QPushButton::clicked, this, &ChatWindow::sendMessage);
  connect(m_stop, &QPushButton::clicked, this, &ChatWindow::stopReply);
  connect(m_regenerate, &QPushButton::clicked, this, &ChatWindow::regenerateReply);
  connect(m_copy, &QPushButton::clicked, this, &ChatWindow::copyReply);
  connect(m_newChat, &QPushButton::clicked, this, &ChatWindow::newConversation);
  connect(m_rename, &QPushButton::clicked, this, &ChatWindow::renameCurrentConversation);
  connect(m_delete, &QPushButton::clicked, this, &ChatWindow::deleteCurrentConversation);
  connect(m_search, &QLineEdit::textChanged, this, &ChatWindow::applyFilter);
  connect(m_conversationList, &QListWidget::currentItemChanged, this,
          [this](QListWidgetItem* item) {
            if (!m_fillingList && item) selectConversation(item->data(kIdRole).toLongLong());
          });
  connect(m_conversationList, &QListWidget::itemChanged, this, &ChatWindow::onItemChanged);
  connect(m_settings, &SettingsPanel::changed, this, &ChatWindow::onSettingsChanged);
}

void ChatWindow::connectEngine() {
  ChatEngine* e = engine();
  // The engine lives on another thread, so every one of these connections is queued.
  connect(this, &ChatWindow::loadModelRequested, e, &ChatEngine::loadModel);
  connect(e, &ChatEngine::modelLoaded, this, &ChatWindow::onModelLoaded);
  connect(e, &ChatEngine::loadFailed, this, &ChatWindow::onLoadFailed);
  connect(e, &ChatEngine::notice, this, &ChatWindow::showBanner);
  connect(e, &ChatEngine::apiStarted, this, [this](const QString& host, int port) {
    setApiStatusText(tr("API on http://%1:%2/v1").arg(host).arg(port));
  });
  connect(e, &ChatEngine::apiStopped, this, [this] { setApiStatusText(QString()); });
  connect(e, &ChatEngine::apiFailed, this, [this](const QString& reason) {
    setApiStatusText(tr("API server failed: %1").arg(reason));
  });
  connect(e, &ChatEngine::loadStarted, m_models, &ModelManager::onLoadStarted);
  connect(e, &ChatEngine::modelLoaded, m_models,
          [this](const QString& name) { m_models->onLoadFinished(true, name); });
  connect(e, &ChatEngine::loadFailed, m_models,
          [this](const QString& reason) { m_models->onLoadFinished(false, reason); });
  connectReplyEngine(e);
}

// Both engines answer a reply the same way; only the running reply's answers count.
void ChatWindow::connectReplyEngine(ReplyEngine* e) {
  connect(e, &ReplyEngine::tokenStreamed, this, [this, e](qint64 id, const QString& text) {
    if (e == m_replyEngine) onTokenStreamed(id, text);
  });
  connect(e, &ReplyEngine::replyFinished, this,
          [this, e](qint64 id, const QString& text, const ReplyStats& stats) {
            if (e == m_replyEngine) onReplyFinished(id, text, stats);
          });
  connect(e, &ReplyEngine::generateFailed, this, [this, e](qint64 id, const QString& reason) {
    if (e == m_replyEngine) onGenerateFailed(id, reason);
  });
}

PoolController* ChatWindow::poolController() const { return m_poolThread->controller(); }

bool ChatWindow::isModelLoaded() const { return m_routes[kThisComputer].ready; }

const ChatWindow::ReplyRoute& ChatWindow::currentRoute() const {
  const int last = static_cast<int>(m_routes.size()) - 1;
  const int index = std::clamp(m_runOn ? m_runOn->currentIndex() : 0, 0, last);
  return m_routes[static_cast<size_t>(index)];
}

void ChatWindow::startPool(qint64 maxDeviceMemoryBytes, bool discovery, bool shareThisComputer) {
  if (m_poolStarted) return;
  m_poolStarted = true;
  PoolController* c = poolController();
  const QString configDir = PoolController::configDirOf(m_dataDirectory);
  const QString nodeName = m_appSettings.nodeName;
  QMetaObject::invokeMethod(
      c,
      [c, configDir, nodeName, discovery, maxDeviceMemoryBytes] {
        c->start(configDir, nodeName, discovery, maxDeviceMemoryBytes);
      },
      Qt::QueuedConnection);
  if (shareThisComputer) {
    const QString modelsDir = m_appSettings.effectiveModelsDir();
    QMetaObject::invokeMethod(
        c, [c, modelsDir] { c->shareThisComputer(modelsDir); }, Qt::QueuedConnection);
  }
}

void ChatWindow::connectPool() {
  PoolController* c = poolController();
  m_pool->attachController(c);
  // Like the engine's, every connection to the controller's thread is queued.
  connect(c, &PoolController::deployed, this, [this] {
    m_routes[kPool].ready = true;
    m_runOn->setVisible(true);
    updateActions();
  });
  connect(m_runOn, &QComboBox::currentIndexChanged, this, [this] { updateActions(); });
  connectReplyEngine(c);
}

void ChatWindow::loadModel(const QString& path) {
  m_pool->setModelPath(path);
  m_routes[kThisComputer].ready = false;
  m_banner->hide();
  m_modelStatus->setText(tr("Loading %1…").arg(QFileInfo(path).fileName()));
  statusBar()->showMessage(tr("Loading model %1…").arg(path));
  updateActions();
  emit loadModelRequested(path);
}

void ChatWindow::pushEngineSettings() {
  ChatEngine* e = engine();
  const AppSettings a = m_appSettings;
  // Runs on the engine thread (the lambda's context object is the engine).
  QMetaObject::invokeMethod(
      e,
      [e, a] {
        e->setCompute(a.backend, a.device, a.threads);
        e->setDraftModel(a.draftModel);
        e->setApiServer(a.apiEnabled, a.apiHost, a.apiPort);
      },
      Qt::QueuedConnection);
}

SettingsDialog* ChatWindow::openSettings() {
  if (m_settingsDialog) {
    m_settingsDialog->raise();
    return m_settingsDialog;
  }
  m_settingsDialog = new SettingsDialog(m_appSettings, probeBackends(), this);
  m_settingsDialog->setObjectName("settingsDialog");
  m_settingsDialog->setAttribute(Qt::WA_DeleteOnClose);
  m_settingsDialog->setApiStatus(m_apiStatusText);
  connect(m_settingsDialog, &QDialog::accepted, this,
          [this] { applySettings(m_settingsDialog->values()); });
  connect(m_settingsDialog, &QObject::destroyed, this, [this] { m_settingsDialog = nullptr; });
  m_settingsDialog->open();
  return m_settingsDialog;
}

void ChatWindow::applySettings(const AppSettings& settings) {
  const bool apiChanged = settings.apiEnabled != m_appSettings.apiEnabled ||
                          settings.apiHost != m_appSettings.apiHost ||
                          settings.apiPort != m_appSettings.apiPort;
  const bool dirChanged = settings.effectiveModelsDir() != m_appSettings.effectiveModelsDir();
  if (m_poolStarted && settings.nodeName != m_appSettings.nodeName) {
    PoolController* c = poolController();
    const QString name = settings.nodeName;
    QMetaObject::invokeMethod(
        c, [c, name] { c->setNodeName(name); }, Qt::QueuedConnection);
  }
  m_appSettings = settings;
  m_appSettings.save();
  if (dirChanged) m_models->setModelsDirectory(m_appSettings.effectiveModelsDir());
  if (dirChanged && m_welcome) m_welcome->setModelsDirectory(m_appSettings.effectiveModelsDir());
  ChatEngine* e = engine();
  const AppSettings a = m_appSettings;
  QMetaObject::invokeMethod(
      e,
      [e, a, apiChanged] {
        e->setCompute(a.backend, a.device, a.threads);
        e->setDraftModel(a.draftModel);
        if (apiChanged) e->setApiServer(a.apiEnabled, a.apiHost, a.apiPort);
      },
      Qt::QueuedConnection);
}

void ChatWindow::setApiStatusText(const QString& text) {
  m_apiStatusText = text;
  m_apiLabel->setText(text);
  m_apiLabel->setVisible(!text.isEmpty());
  if (m_settingsDialog) m_settingsDialog->setApiStatus(text);
}

bool ChatWindow::showPage(const QString& name) {
  if (name == "welcome") {
    showWelcome();
    return true;
  }
  if (name == "chat") {
    m_pages->setCurrentIndex(0);
  } else if (name == "models") {
    m_pages->setCurrentWidget(m_modelsPage);
    m_modelsPage->showLocal();
  } else if (name == "discover") {
    m_pages->setCurrentWidget(m_modelsPage);
    m_modelsPage->showDiscover();
  } else if (name == "pool") {
    m_pages->setCurrentWidget(m_pool);
  } else {
    return false;
  }
  m_stack->setCurrentWidget(m_pages);
  return true;
}

void ChatWindow::onModelLoaded(const QString& name, int contextLength, const QString& arch) {
  m_routes[kThisComputer].ready = true;
  m_modelStatus->setText(tr("%1 · %2 · context %3").arg(name, arch).arg(contextLength));
  statusBar()->showMessage(tr("Model %1 loaded.").arg(name), kStatusMs);
  updateActions();
  if (!m_sendWhenLoaded.isEmpty()) sendWhenLoaded(std::exchange(m_sendWhenLoaded, QString()));
}

void ChatWindow::sendWhenLoaded(const QString& text) {
  if (!isModelLoaded()) {
    m_sendWhenLoaded = text;
    return;
  }
  newConversation();
  m_input->setPlainText(text);
  sendMessage();
}

void ChatWindow::onLoadFailed(const QString& reason) {
  m_routes[kThisComputer].ready = false;
  m_modelStatus->setText(tr("No model"));
  statusBar()->clearMessage();
  showBanner(tr("The model could not be loaded: %1").arg(reason));
  updateActions();
}

void ChatWindow::showBanner(const QString& text) {
  m_banner->setText(text);
  m_banner->show();
}

void ChatWindow::reloadConversationList() {
  m_fillingList = true;
  m_conversationList->clear();
  for (const StoredConversation& c : m_store->conversations()) {
    auto* item = new QListWidgetItem(c.title);
    item->setData(kIdRole, c.id);
    item->setFlags(item->flags() | Qt::ItemIsEditable);
    item->setToolTip(c.updatedAt.toString(Qt::TextDate));
    m_conversationList->addItem(item);
    if (c.id == m_current) m_conversationList->setCurrentItem(item);
  }
  m_fillingList = false;
  applyFilter();
}

void ChatWindow::applyFilter() {
  const QString needle = m_search->text().trimmed();
  for (int i = 0; i < m_conversationList->count(); ++i) {
    QListWidgetItem* item = m_conversationList->item(i);
    item->setHidden(!needle.isEmpty() && !item->text().contains(needle, Qt::CaseInsensitive));
  }
}

QListWidgetItem* ChatWindow::itemFor(qint64 id) const {
  for (int i = 0; i < m_conversationList->count(); ++i) {
    if (m_conversationList->item(i)->data(kIdRole).toLongLong() == id) {
      return m_conversationList->item(i);
    }
  }
  return nullptr;
}

void ChatWindow::newConversation() {
  if (m_current >= 0 && m_messages.isEmpty() && m_current != m_generatingConversation) {
    m_input->setFocus();  // the current one is still empty: use it
    return;
  }
  const qint64 id = m_store->createConversation(defaultTitle(), QString(), GenerationSettings{});
  if (id < 0) {
    showBanner(m_store->error());
    return;
  }
  m_current = id;
  reloadConversationList();
  selectConversation(id);
  m_input->setFocus();
}

void ChatWindow::selectConversation(qint64 id) {
  const std::optional<StoredConversation> c = m_store->conversation(id);
  if (!c) return;
  m_current = id;
  m_messages = m_store->messages(id);
  // The running reply's saved part is shown from the stream, not twice.
  m_messages.removeIf([this](const StoredMessage& m) { return m.id == m_partialId; });
  m_settings->setValues(c->systemPrompt, c->settings);
  if (QListWidgetItem* item = itemFor(id); item && m_conversationList->currentItem() != item) {
    m_fillingList = true;
    m_conversationList->setCurrentItem(item);
    m_fillingList = false;
  }
  renderTranscript();
  updateActions();
}

void ChatWindow::onItemChanged(QListWidgetItem* item) {
  if (m_fillingList || !item) return;
  const qint64 id = item->data(kIdRole).toLongLong();
  const QString title = item->text().simplified();
  if (title.isEmpty()) {  // an empty name is no name: put the old one back
    if (const auto c = m_store->conversation(id)) {
      m_fillingList = true;
      item->setText(c->title);
      m_fillingList = false;
    }
    return;
  }
  if (!m_store->renameConversation(id, title)) showBanner(m_store->error());
}

void ChatWindow::renameCurrentConversation() {
  if (QListWidgetItem* item = itemFor(m_current)) m_conversationList->editItem(item);
}

void ChatWindow::deleteCurrentConversation() {
  if (m_current < 0 || m_current == m_generatingConversation) return;
  const qint64 id = m_current;
  auto* box = new QMessageBox(QMessageBox::Question, tr("Delete conversation"),
                              tr("Delete this conversation and all its messages?"),
                              QMessageBox::Yes | QMessageBox::No, this);
  box->setObjectName("confirmDelete");
  box->setAttribute(Qt::WA_DeleteOnClose);
  // open(), not exec(): the window (and the engine's signals) keep running meanwhile.
  connect(box, &QMessageBox::finished, this, [this, id, box] {
    if (box->result() != QMessageBox::Yes) return;
    if (!m_store->deleteConversation(id)) {
      showBanner(m_store->error());
      return;
    }
    if (m_current == id) {
      m_current = -1;
      m_messages.clear();
    }
    reloadConversationList();
    const QList<StoredConversation> all = m_store->conversations();
    if (!all.isEmpty()) {
      selectConversation(all.front().id);
    } else {
      renderTranscript();
      updateActions();
    }
  });
  box->open();
}

void ChatWindow::onSettingsChanged() {
  if (m_current < 0) return;
  if (!m_store->updateConversationSettings(m_current, m_settings->systemPrompt(),
                                           m_settings->settings())) {
    showBanner(m_store->error());
  }
}

void ChatWindow::sendMessage() {
  const QString text = m_input->toPlainText().trimmed();
  if (text.isEmpty() || !currentRoute().ready || isGenerating()) return;
  if (m_current < 0) {
    const qint64 id = m_store->createConversation(titleFrom(text), m_settings->systemPrompt(),
                                                  m_settings->settings());
    if (id < 0) {
      showBanner(m_store->error());
      return;
    }
    m_current = id;
    m_messages.clear();
  } else if (m_messages.isEmpty()) {
    if (const auto c = m_store->conversation(m_current); c && c->title == defaultTitle()) {
      m_store->renameConversation(m_current, titleFrom(text));
    }
  }
  // Saved (committed) before anything is generated: a crash mid-reply keeps the question.
  const qint64 messageId = m_store->addMessage(m_current, "user", text);
  if (messageId < 0) {
    showBanner(m_store->error());
    return;
  }
  m_messages.push_back(StoredMessage{messageId, "user", text, false, {}});
  m_input->clear();
  reloadConversationList();
  startReply();
}

void ChatWindow::startReply() {
  QList<ChatTurn> turns;
  const QString system = m_settings->systemPrompt().trimmed();
  if (!system.isEmpty()) turns.push_back({"system", system});
  for (const StoredMessage& m : m_messages) turns.push_back({m.role, m.content});
  m_generatingConversation = m_current;
  m_streamText.clear();
  m_replyEngine = replyEngine();
  m_replyEngine->requestReply(m_current, turns, m_settings->settings());
  statusBar()->showMessage(tr("Generating…"));
  renderTranscript();
  updateActions();
}

void ChatWindow::stopReply() {
  if (m_replyEngine) m_replyEngine->stop();
}

void ChatWindow::regenerateReply() {
  if (isGenerating() || !currentRoute().ready || m_messages.isEmpty()) return;
  if (m_messages.back().role == "assistant") {
    if (!m_store->deleteMessage(m_messages.back().id)) {
      showBanner(m_store->error());
      return;
    }
    m_messages.pop_back();
  }
  if (m_messages.isEmpty() || m_messages.back().role != "user") return;
  startReply();
}

void ChatWindow::copyReply() {
  QString text = m_transcript->textCursor().selectedText();
  text.replace(QChar::ParagraphSeparator, '\n');
  if (text.isEmpty()) {
    for (auto it = m_messages.crbegin(); it != m_messages.crend(); ++it) {
      if (it->role == "assistant") {
        text = it->content;
        break;
      }
    }
  }
  if (text.isEmpty()) return;
  QApplication::clipboard()->setText(text);
  statusBar()->showMessage(tr("Copied."), kStatusMs);
}

void ChatWindow::onTokenStreamed(qint64 conversationId, const QString& text) {
  if (conversationId != m_generatingConversation) return;
  m_streamText += text;
  if (!m_partialTimer->isActive()) m_partialTimer->start();
  if (conversationId == m_current) scheduleRender();
}

void ChatWindow::savePartialReply() {
  if (!isGenerating() || m_streamText.isEmpty()) return;
  if (m_partialId < 0) {
    m_partialId = m_store->addMessage(m_generatingConversation, "assistant", m_streamText);
    if (m_partialId < 0) showBanner(m_store->error());
  } else if (!m_store->updateMessage(m_partialId, m_streamText)) {
    showBanner(m_store->error());
  }
}

void ChatWindow::onReplyFinished(qint64 conversationId, const QString& text,
                                 const ReplyStats& stats) {
  m_replyEngine = nullptr;
  m_generatingConversation = -1;
  m_streamText.clear();
  m_partialTimer->stop();
  const qint64 partial = std::exchange(m_partialId, -1);
  // A reply stopped before its first character has nothing worth keeping.
  const bool keep = !(text.isEmpty() && stats.finishReason == "cancelled");
  if (!keep && partial >= 0) m_store->deleteMessage(partial);
  if (keep) {
    qint64 id = partial;
    if (partial < 0) {
      id = m_store->addMessage(conversationId, "assistant", text, stats);
    } else if (!m_store->updateMessage(partial, text, stats)) {
      id = -1;
    }
    if (id < 0) {
      showBanner(m_store->error());
    } else if (conversationId == m_current) {
      m_messages.push_back(StoredMessage{id, "assistant", text, true, stats});
    }
  }
  statusBar()->showMessage(replyStatsLine(stats), kStatusMs);
  reloadConversationList();
  renderTranscript();
  updateActions();
  emit replyDone(conversationId, stats.finishReason);
}

void ChatWindow::onGenerateFailed(qint64 conversationId, const QString& reason) {
  m_replyEngine = nullptr;
  m_generatingConversation = -1;
  m_streamText.clear();
  m_partialTimer->stop();
  // A reply that failed half-way is not a reply; the banner says what happened.
  if (const qint64 partial = std::exchange(m_partialId, -1); partial >= 0) {
    m_store->deleteMessage(partial);
  }
  showBanner(tr("No reply: %1").arg(reason));
  statusBar()->clearMessage();
  renderTranscript();
  updateActions();
  emit replyDone(conversationId, QString());
}

void ChatWindow::scheduleRender() {
  if (!m_renderTimer->isActive()) m_renderTimer->start();
}

void ChatWindow::renderTranscript() {
  m_renderTimer->stop();
  QScrollBar* bar = m_transcript->verticalScrollBar();
  const bool atBottom = bar->value() >= bar->maximum() - 4;
  const bool streaming = isGenerating() && m_generatingConversation == m_current;
  m_transcript->document()->setMarkdown(
      transcriptMarkdown(m_messages, m_streamText, streaming, m_expandedReasoning));
  if (atBottom || streaming) bar->setValue(bar->maximum());
}

void ChatWindow::updateActions() {
  const bool busy = isGenerating();
  const bool hasText = !m_input->toPlainText().trimmed().isEmpty();
  const bool ready = currentRoute().ready;
  m_runOn->setEnabled(!busy);
  m_send->setEnabled(ready && !busy && hasText);
  m_stop->setEnabled(busy);
  m_regenerate->setEnabled(ready && !busy && !m_messages.isEmpty());
  m_copy->setEnabled(!m_messages.isEmpty());
  m_rename->setEnabled(m_current >= 0);
  m_delete->setEnabled(m_current >= 0 && m_current != m_generatingConversation);
}

}  // namespace shoal::gui
