// The first run: with no model anywhere the app shows the welcome page instead of an error;
// "Download the default model" runs the fetch script (here a fake one, named by
// SHOAL_FETCH_DEFAULT_MODEL, that copies the default model into the directory it is given, as
// the real shoal-fetch-default-model downloads it there), and the app then loads the model and
// shows the chat. A failing script's last line is shown; "Find a model" opens Models → Discover.

#include <signal.h>

#include <QDir>
#include <QFile>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "app/gui/app_settings.h"
#include "app/gui/chat_store.h"
#include "app/gui/chat_window.h"
#include "app/gui/hub_search_panel.h"
#include "app/gui/model_manager.h"
#include "app/gui/model_path.h"
#include "app/gui/models_page.h"
#include "app/gui/welcome_page.h"

using namespace shoal::gui;

namespace {

constexpr int kTimeoutMs = 120000;
const char* const kDefaultModel = "SmolLM2-135M-Instruct.Q4_1.gguf";

QString defaultModel() { return QDir(SHOAL_MODELS_DIR).filePath(kDefaultModel); }

bool writeScript(const QString& path, const QString& body) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly)) return false;
  f.write(("#!/bin/sh\nset -eu\n" + body).toUtf8());
  f.close();
  return f.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
}

// A process that exited but whose parent has not waited for it yet.
bool isZombie(pid_t pid) {
  QFile stat(QString("/proc/%1/stat").arg(pid));
  if (!stat.open(QIODevice::ReadOnly)) return true;  // gone meanwhile
  const QByteArray line = stat.readAll();
  const qsizetype close = line.lastIndexOf(')');
  return close > 0 && line.mid(close + 2, 1) == "Z";
}

template <class T>
T* child(QObject* parent, const char* name) {
  T* c = parent->findChild<T*>(name);
  if (!c) qFatal("no child %s", name);
  return c;
}

}  // namespace

class TestWelcomePage : public QObject {
  Q_OBJECT

  std::unique_ptr<QTemporaryDir> m_dir;
  QString m_userModels;  // $XDG_DATA_HOME/shoal/models

 private slots:
  // An empty data dir: no settings, no model in the user's models dir, and SHOAL_MODEL naming a
  // file that is not there (the build tree's models/ would otherwise count: default_model.h).
  void init() {
    m_dir = std::make_unique<QTemporaryDir>();
    const QDir d(m_dir->path());
    qputenv("SHOAL_DATA_DIR", d.filePath("data").toLocal8Bit());
    qputenv("XDG_DATA_HOME", d.filePath("xdg").toLocal8Bit());
    m_userModels = d.filePath("xdg/shoal/models");
    qputenv("SHOAL_MODEL", QDir(m_userModels).filePath(kDefaultModel).toLocal8Bit());
    qunsetenv("SHOAL_MODELS_DIR");
  }

  void cleanup() {
    for (const char* v :
         {"SHOAL_DATA_DIR", "XDG_DATA_HOME", "SHOAL_MODEL", "SHOAL_FETCH_DEFAULT_MODEL"}) {
      qunsetenv(v);
    }
  }

  void theDefaultModelIsFetchedAndLoaded() {
    if (!QFile::exists(defaultModel())) QSKIP("default model not present");
    const QString script = QDir(m_dir->path()).filePath("fake-fetch");
    QVERIFY(writeScript(script, QString("echo \"fetching into $1\"\nmkdir -p \"$1\"\n"
                                        "cp '%1' \"$1/%2\"\necho \"installed $1/%2\"\n")
                                    .arg(defaultModel(), kDefaultModel)));
    qputenv("SHOAL_FETCH_DEFAULT_MODEL", script.toLocal8Bit());
    QCOMPARE(AppSettings::load().effectiveModelsDir(), m_userModels);

    ChatWindow w(defaultModelPath(), ChatStore::defaultDirectory());
    QVERIFY(w.isWelcomeShown());
    WelcomePage* welcome = w.welcomePage();
    QTest::mouseClick(child<QPushButton>(welcome, "fetchDefaultModelButton"), Qt::LeftButton);
    QVERIFY(welcome->isFetching());
    QTRY_VERIFY_WITH_TIMEOUT(w.isModelLoaded(), kTimeoutMs);
    QVERIFY(!w.isWelcomeShown());
    QVERIFY(QFile::exists(QDir(m_userModels).filePath(kDefaultModel)));
    QVERIFY(child<QPlainTextEdit>(welcome, "fetchLog")->toPlainText().contains("installed"));
    QCOMPARE(child<QTabWidget>(&w, "pages")->currentIndex(), 0);  // the chat
    // The Local tab lists it too.
    QTRY_VERIFY_WITH_TIMEOUT(w.modelManager()->rowOf(kDefaultModel) >= 0, kTimeoutMs);
  }

  void aFailedFetchShowsTheScriptsLastLine() {
    const QString script = QDir(m_dir->path()).filePath("failing-fetch");
    QVERIFY(writeScript(script,
                        "echo 'downloading'\necho 'sha256 mismatch for x.gguf' >&2\n"
                        "exit 1\n"));
    qputenv("SHOAL_FETCH_DEFAULT_MODEL", script.toLocal8Bit());
    ChatWindow w(defaultModelPath(), ChatStore::defaultDirectory());
    QVERIFY(w.isWelcomeShown());
    WelcomePage* welcome = w.welcomePage();
    welcome->fetchDefaultModel();
    auto* status = child<QLabel>(welcome, "welcomeStatus");
    QTRY_VERIFY_WITH_TIMEOUT(status->text().contains("sha256 mismatch for x.gguf"), kTimeoutMs);
    QVERIFY(!welcome->isFetching());
    QVERIFY(w.isWelcomeShown());
    QVERIFY(child<QPushButton>(welcome, "fetchDefaultModelButton")->isEnabled());
  }

  // Cancel stops the whole fetch — the script and the download it runs (pip in the real one) —
  // and the script's traps clean up its temporary directory.
  void cancelStopsTheFetchAndWhatItRuns() {
    const QDir d(m_dir->path());
    const QString script = d.filePath("slow-fetch");
    QVERIFY(writeScript(script, QString("tmp=$(mktemp -d '%1/fetch.XXXXXX')\n"
                                        "trap 'rm -rf \"$tmp\"' EXIT\n"
                                        "trap 'exit 143' TERM\n"
                                        "echo downloading\n"
                                        // In the foreground, as the real script runs pip: a
                                        // shell waiting on it runs no trap until it ends.
                                        "sh -c 'echo $$ > %1/child.pid; exec sleep 600'\n")
                                    .arg(d.path())));
    qputenv("SHOAL_FETCH_DEFAULT_MODEL", script.toLocal8Bit());
    ChatWindow w(defaultModelPath(), ChatStore::defaultDirectory());
    WelcomePage* welcome = w.welcomePage();
    welcome->fetchDefaultModel();
    QTRY_VERIFY_WITH_TIMEOUT(QFileInfo(d.filePath("child.pid")).size() > 0, kTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(
        child<QPlainTextEdit>(welcome, "fetchLog")->toPlainText().contains("downloading"),
        kTimeoutMs);
    QFile pidFile(d.filePath("child.pid"));
    QVERIFY(pidFile.open(QIODevice::ReadOnly));
    const pid_t childPid = static_cast<pid_t>(pidFile.readAll().trimmed().toLong());
    QVERIFY(childPid > 0);
    QTest::mouseClick(child<QPushButton>(welcome, "cancelFetchButton"), Qt::LeftButton);
    // Well before the child's 600 s: a Cancel that reached only the script would wait for it.
    QTRY_VERIFY_WITH_TIMEOUT(!welcome->isFetching(), 30000);
    // The child was signalled with the script: gone (or a zombie about to be reaped by init).
    QTRY_VERIFY_WITH_TIMEOUT(::kill(childPid, 0) != 0 || isZombie(childPid), kTimeoutMs);
    QVERIFY(d.entryList({"fetch.*"}, QDir::Dirs).isEmpty());  // the EXIT trap ran
    QVERIFY(w.isWelcomeShown());
    QVERIFY(child<QPushButton>(welcome, "fetchDefaultModelButton")->isEnabled());
  }

  void findAModelOpensDiscover() {
    ChatWindow w(defaultModelPath(), ChatStore::defaultDirectory());
    QVERIFY(w.isWelcomeShown());
    QTest::mouseClick(child<QPushButton>(w.welcomePage(), "findModelButton"), Qt::LeftButton);
    QVERIFY(!w.isWelcomeShown());
    QCOMPARE(w.modelsPage()->currentWidget(), static_cast<QWidget*>(w.modelsPage()->discover()));
    QCOMPARE(child<QTabWidget>(&w, "pages")->currentWidget(),
             static_cast<QWidget*>(w.modelsPage()));
  }

  void aModelInTheModelsDirectoryIsNoFirstRun() {
    QVERIFY(QDir().mkpath(m_userModels));
    QFile f(QDir(m_userModels).filePath("other.gguf"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("GGUF");
    f.close();
    ChatWindow w(defaultModelPath(), ChatStore::defaultDirectory());
    QVERIFY(!w.isWelcomeShown());
  }
};

QTEST_MAIN(TestWelcomePage)
#include "test_welcome_page.moc"
