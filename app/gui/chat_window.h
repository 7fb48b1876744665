#pragma once
// The chat window: conversations on the left (create, rename, delete, filter), the transcript
// with the message box and Stop/Regenerate/Copy in the middle, the conversation's system prompt
// and sampling settings on the right. Replies run in a ReplyEngine on its own thread
// (reply_engine.h for the contract): the ChatEngine on this computer, or the PoolController once a
// pool is deployed and "Run on: Pool" is picked; the window treats both alike. Messages are saved
// to the ChatStore as soon as they are complete, and the reply being generated about once a second.

#include <QMainWindow>
#include <QSet>
#include <array>
#include <memory>

#include "app/gui/app_settings.h"
#include "app/gui/chat_engine.h"
#include "app/gui/chat_store.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QListWidgetItem;
class QPushButton;
class QStackedWidget;
class QTabWidget;
class QTextBrowser;
class QTimer;

namespace shoal::gui {

class ChatInput;
class ModelManager;
class ModelsPage;
class PoolController;
class PoolControllerThread;
class PoolView;
class SettingsDialog;
class SettingsPanel;
class WelcomePage;

class ChatWindow : public QMainWindow {
  Q_OBJECT

 public:
  // Opens the store in dataDirectory and starts loading modelPath (the status bar says so; a
  // failure shows in a banner above the transcript). On a first run — modelPath does not exist
  // and the models directory holds no GGUF file — shows the welcome page instead.
  ChatWindow(const QString& modelPath, const QString& dataDirectory, QWidget* parent = nullptr);
  ~ChatWindow() override;

  ChatEngine* engine() const { return m_engineThread->engine(); }
  ChatStore& store() { return *m_store; }
  qint64 currentConversationId() const { return m_current; }
  bool isModelLoaded() const;
  bool isGenerating() const { return m_generatingConversation >= 0; }
  ModelManager* modelManager() const { return m_models; }
  ModelsPage* modelsPage() const { return m_modelsPage; }
  // The first-run page; null when the app did not start without a model.
  WelcomePage* welcomePage() const { return m_welcome; }
  bool isWelcomeShown() const;
  PoolView* poolView() const { return m_pool; }
  const AppSettings& appSettings() const { return m_appSettings; }
  // Show a page by name: "chat", "models" (its Local tab), "discover" (Models → Discover),
  // "pool", "welcome" (the first-run page, made if needed) (false for an unknown name).
  bool showPage(const QString& name);
  // The API server's state as the engine last reported it, for people ("" when off).
  QString apiStatus() const { return m_apiStatusText; }
  PoolController* poolController() const;
  // Starts the pool controller (identity in <data dir>/pool, discovery under the node name from
  // Settings) unless it is started; the pool page does it when first shown.
  // maxDeviceMemoryBytes: the most any pooled device may give (0: what it has free);
  // shareThisComputer: this machine's devices join the pool too (PoolController).
  void startPool(qint64 maxDeviceMemoryBytes = 0, bool discovery = true,
                 bool shareThisComputer = true);
  // "Run on: This computer | Pool", shown once a pool is deployed.
  QComboBox* runOnBox() const { return m_runOn; }
  // Where the next reply runs: the engine "Run on" picks.
  ReplyEngine* replyEngine() const { return currentRoute().engine; }

 public slots:
  void loadModel(const QString& path);
  void newConversation();  // Ctrl+N; reuses the current one when it is still empty
  void selectConversation(qint64 id);
  void sendMessage();                // Enter: the input box's text as the next user turn
  void stopReply();                  // Esc / Stop
  void regenerateReply();            // replace the last reply with a fresh one
  void copyReply();                  // the selection, or else the last reply, to the clipboard
  void renameCurrentConversation();  // edit the title in place
  void deleteCurrentConversation();  // after a confirmation
  // Opens the Settings dialog (non-modal; it applies itself when accepted) and returns it.
  SettingsDialog* openSettings();
  // Save the app settings and apply them: models directory now, compute at the next load, the
  // API server now.
  void applySettings(const AppSettings& settings);
  // Once the model has loaded (now, if it already has), start a new conversation with `text` as
  // its first message. The `--send-on-start` option of the app (crash and screenshot tests).
  void sendWhenLoaded(const QString& text);

 signals:
  void loadModelRequested(const QString& path);  // queued to the engine
  // After the reply has been saved (or not: a failure has an empty finishReason and a reason).
  void replyDone(qint64 conversationId, const QString& finishReason);

 private:
  void buildUi();
  void showWelcome();
  void connectEngine();
  void connectPool();
  void connectReplyEngine(ReplyEngine* e);
  void reloadConversationList();
  void applyFilter();
  void startReply();
  void renderTranscript();
  void scheduleRender();
  void savePartialReply();
  void updateActions();
  void showBanner(const QString& text);
  void onModelLoaded(const QString& name, int contextLength, const QString& architecture);
  void onLoadFailed(const QString& reason);
  void onTokenStreamed(qint64 conversationId, const QString& text);
  void onReplyFinished(qint64 conversationId, const QString& text, const ReplyStats& stats);
  void onGenerateFailed(qint64 conversationId, const QString& reason);
  void onSettingsChanged();
  void pushEngineSettings();
  void setApiStatusText(const QString& text);
  void onItemChanged(QListWidgetItem* item);
  QListWidgetItem* itemFor(qint64 id) const;

  // A place a reply can run, as "Run on" lists them.
  struct ReplyRoute {
    ReplyEngine* engine = nullptr;
    bool ready = false;  // it has a model to reply with (loaded here; deployed on the pool)
  };
  const ReplyRoute& currentRoute() const;

  AppSettings m_appSettings;
  std::unique_ptr<ChatStore> m_store;
  std::unique_ptr<ChatEngineThread> m_engineThread;
  std::unique_ptr<PoolControllerThread> m_poolThread;
  QString m_dataDirectory;
  bool m_poolStarted = false;
  std::array<ReplyRoute, 2> m_routes;    // in m_runOn's order: this computer, the pool
  ReplyEngine* m_replyEngine = nullptr;  // the running reply's; null: none
  QComboBox* m_runOn = nullptr;

  QStackedWidget* m_stack = nullptr;  // m_pages, or the welcome page on a first run
  QTabWidget* m_pages = nullptr;      // Chat, Models, Devices & pool
  ModelsPage* m_modelsPage = nullptr;
  ModelManager* m_models = nullptr;  // its Local tab
  WelcomePage* m_welcome = nullptr;
  PoolView* m_pool = nullptr;
  bool m_localDevicesListed = false;  // the pool page lists them when first shown
  QListWidget* m_conversationList = nullptr;
  QLineEdit* m_search = nullptr;
  QLabel* m_banner = nullptr;
  QTextBrowser* m_transcript = nullptr;
  ChatInput* m_input = nullptr;
  QPushButton* m_send = nullptr;
  QPushButton* m_stop = nullptr;
  QPushButton* m_regenerate = nullptr;
  QPushButton* m_copy = nullptr;
  QPushButton* m_newChat = nullptr;
  QPushButton* m_rename = nullptr;
  QPushButton* m_delete = nullptr;
  SettingsPanel* m_settings = nullptr;
  QLabel* m_modelStatus = nullptr;
  QLabel* m_apiLabel = nullptr;  // status bar: where the API is served
  QString m_apiStatusText;
  SettingsDialog* m_settingsDialog = nullptr;  // while open
  QTimer* m_renderTimer = nullptr;   // coalesces streamed tokens into one repaint per tick
  QTimer* m_partialTimer = nullptr;  // saves the running reply about once a second

  qint64 m_current = -1;                 // shown conversation; -1: none
  QList<StoredMessage> m_messages;       // of m_current, as stored
  QSet<qint64> m_expandedReasoning;      // message ids whose reasoning is shown
  qint64 m_generatingConversation = -1;  // conversation whose reply is running; -1: none
  QString m_streamText;                  // the running reply so far
  qint64 m_partialId = -1;               // its row in the store once saved; -1: not yet
  bool m_fillingList = false;            // itemChanged while the list is rebuilt is no rename
  QString m_sendWhenLoaded;              // sendWhenLoaded()'s text until the model is loaded
};

}  // namespace shoal::gui
