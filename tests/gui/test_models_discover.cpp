// The Models page's Discover tab against tests/hub/fake_hub.py (a local stand-in for the Hugging
// Face Hub, started here on 127.0.0.1 and named by HF_ENDPOINT): a search lists the repositories,
// a repository's models (a split model as one row) get their fit from their headers, a download
// ends in the Local tab and loads; a gated repository's refusal names HF_TOKEN; Delete removes
// every part of a split model.

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "app/gui/app_settings.h"
#include "app/gui/chat_engine.h"
#include "app/gui/chat_window.h"
#include "app/gui/download_row.h"
#include "app/gui/hub_search_panel.h"
#include "app/gui/model_manager.h"
#include "app/gui/models_page.h"
#include "tests/hub/fake_hub_process.h"

using namespace shoal::gui;
using shoal::testing::FakeHubProcess;

namespace {

constexpr int kTimeoutMs = 120000;
const char* const kDefaultModel = "SmolLM2-135M-Instruct.Q4_1.gguf";
const char* const kRepo = "shoal-test/SmolLM2-135M-Instruct-GGUF";
const char* const kGatedRepo = "shoal-test/Gated-GGUF";
// Columns of the files table (hub_search_panel.cpp).
constexpr int kFileName = 0;
constexpr int kParts = 3;
constexpr int kHere = 4;
constexpr int kPool = 5;

QString defaultModel() { return QDir(SHOAL_MODELS_DIR).filePath(kDefaultModel); }

QJsonObject file(const QString& path, const QString& source) {
  return QJsonObject{{"path", path}, {"source", source}};
}

template <class T>
T* child(QObject* parent, const char* name) {
  T* c = parent->findChild<T*>(name);
  if (!c) qFatal("no child %s", name);
  return c;
}

int rowOf(QTableWidget* table, int column, const QString& text) {
  for (int r = 0; r < table->rowCount(); ++r) {
    if (table->item(r, column) && table->item(r, column)->text() == text) return r;
  }
  return -1;
}

}  // namespace

class TestModelsDiscover : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  FakeHubProcess m_hub;
  QString m_models;  // the app's models directory (empty at the start)

 private slots:
  void initTestCase() {
    if (!QFile::exists(defaultModel())) QSKIP("default model not present");
    const QDir d(m_dir.path());
    QVERIFY(shoal::testing::writeBytesFile(d.filePath("part1"), 300000, 1));
    QVERIFY(shoal::testing::writeBytesFile(d.filePath("part2"), 200000, 2));
    QJsonObject repo{{"id", kRepo},
                     {"downloads", 1234},
                     {"likes", 5},
                     {"lastModified", "2026-01-02T03:04:05.000Z"},
                     {"files", QJsonArray{file(kDefaultModel, defaultModel()),
                                          file("Big-Q8_0-00001-of-00002.gguf", d.filePath("part1")),
                                          file("Big-Q8_0-00002-of-00002.gguf", d.filePath("part2")),
                                          QJsonObject{{"path", "README.md"}, {"text", "hi"}}}}};
    QJsonObject gated{{"id", kGatedRepo},
                      {"downloads", 7},
                      {"gated", true},
                      {"files", QJsonArray{file("Gated-Q4_1.gguf", defaultModel())}}};
    QString error;
    QVERIFY2(m_hub.start(m_dir.path(),
                         QJsonObject{{"repos", QJsonArray{repo, gated}}, {"token", "secret-token"}},
                         &error),
             qPrintable(error));
    qputenv("HF_ENDPOINT", m_hub.endpoint().toUtf8());
    qunsetenv("HF_TOKEN");
    qputenv("SHOAL_DATA_DIR", d.filePath("data").toLocal8Bit());
    m_models = d.filePath("models");
    QVERIFY(QDir().mkpath(m_models));
    AppSettings s = AppSettings::load();
    s.modelsDir = m_models;
    s.save();
  }

  void cleanupTestCase() {
    m_hub.stop();
    qunsetenv("HF_ENDPOINT");
    qunsetenv("SHOAL_DATA_DIR");
  }

  void searchFitDownloadAndLoadTheDefaultModel() {
    ChatWindow w(QDir(m_models).filePath(kDefaultModel), QDir(m_dir.path()).filePath("data"));
    QVERIFY(m_hub.requests().empty());  // nothing is asked before the user searches
    QVERIFY(w.showPage("discover"));
    HubSearchPanel* panel = w.modelsPage()->discover();
    QSignalSpy searched(panel, &HubSearchPanel::searchShown);
    QTest::keyClicks(child<QLineEdit>(panel, "hubSearchBox"), "smollm2");
    QTest::mouseClick(child<QPushButton>(panel, "hubSearchButton"), Qt::LeftButton);
    QVERIFY(searched.wait(kTimeoutMs));
    auto* results = child<QTableWidget>(panel, "hubResults");
    QCOMPARE(results->rowCount(), 1);  // the search text matches one repository
    QCOMPARE(results->item(0, 0)->text(), QString(kRepo));
    QCOMPARE(results->item(0, 1)->text(), QLocale().toString(1234));

    QSignalSpy fits(panel, &HubSearchPanel::fitsShown);
    panel->selectRepo(0);
    QVERIFY(fits.wait(kTimeoutMs));
    auto* files = child<QTableWidget>(panel, "hubFiles");
    QCOMPARE(files->rowCount(), 2);  // the two parts of the split model are one row
    const int split = rowOf(files, kFileName, "Big-Q8_0-00001-of-00002.gguf");
    QVERIFY(split >= 0);
    QCOMPARE(files->item(split, kParts)->text(), QString("2"));
    const int row = rowOf(files, kFileName, kDefaultModel);
    QVERIFY(row >= 0);
    QVERIFY2(
        files->item(row, kHere)->text() == "runs",
        qPrintable(files->item(row, kHere)->text() + ": " + files->item(row, kHere)->toolTip()));
    QCOMPARE(files->item(row, kPool)->text(), QString("no pool"));
    QVERIFY(!files->item(row, 6)->text().isEmpty());  // predicted tok/s

    panel->selectModel(row);
    QSignalSpy downloaded(panel, &HubSearchPanel::downloaded);
    QTest::mouseClick(child<QPushButton>(panel, "hubDownloadButton"), Qt::LeftButton);
    QVERIFY(downloaded.wait(kTimeoutMs));
    const QString path = QDir(m_models).filePath(kDefaultModel);
    QCOMPARE(downloaded.first().at(0).toString(), path);
    QCOMPARE(shoal::testing::sha256Of(path), shoal::testing::sha256Of(defaultModel()));

    // The Local tab lists it, selected, and Load loads it.
    ModelManager* local = w.modelManager();
    QTRY_VERIFY_WITH_TIMEOUT(local->rowOf(kDefaultModel) >= 0, kTimeoutMs);
    QTRY_COMPARE(w.modelsPage()->currentWidget(), static_cast<QWidget*>(local));
    auto* load = child<QPushButton>(local, "loadModelButton");
    QTRY_VERIFY(load->isEnabled());
    QSignalSpy requested(local, &ModelManager::loadRequested);
    QTest::mouseClick(load, Qt::LeftButton);
    QCOMPARE(requested.count(), 1);
    QCOMPARE(requested.first().at(0).toString(), path);
    QTRY_VERIFY_WITH_TIMEOUT(w.isModelLoaded(), kTimeoutMs);
  }

  void aGatedRepositorysRefusalNamesTheToken() {
    QTemporaryDir models;
    ModelsPage page(models.path(), QDir(m_dir.path()).filePath("node"), {});
    HubSearchPanel* panel = page.discover();
    QSignalSpy searched(panel, &HubSearchPanel::searchShown);
    QTest::keyClicks(child<QLineEdit>(panel, "hubSearchBox"), "gated");
    panel->search();
    QVERIFY(searched.wait(kTimeoutMs));
    auto* results = child<QTableWidget>(panel, "hubResults");
    QCOMPARE(results->rowCount(), 1);
    QCOMPARE(results->item(0, 4)->text(), QString("gated"));
    QSignalSpy fits(panel, &HubSearchPanel::fitsShown);
    panel->selectRepo(0);
    QVERIFY(fits.wait(kTimeoutMs));
    auto* files = child<QTableWidget>(panel, "hubFiles");
    QCOMPARE(files->rowCount(), 1);
    // Its header cannot be read without the token either.
    QVERIFY2(files->item(0, kHere)->text().contains("HF_TOKEN"),
             qPrintable(files->item(0, kHere)->text()));
    panel->selectModel(0);
    auto* status = child<QLabel>(panel, "hubStatus");
    QTest::mouseClick(child<QPushButton>(panel, "hubDownloadButton"), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(status->text().contains("HF_TOKEN"), kTimeoutMs);
    QVERIFY2(status->text().contains("gated"), qPrintable(status->text()));
    QVERIFY(!QFile::exists(QDir(models.path()).filePath("Gated-Q4_1.gguf")));
  }

  void cancelStopsTheDownloadAndRemovesThePartialFile() {
    // A slow server: the download is still running when Cancel is pressed.
    QTemporaryDir dir;
    FakeHubProcess slow;
    QJsonObject repo{{"id", kRepo}, {"files", QJsonArray{file(kDefaultModel, defaultModel())}}};
    QString error;
    QVERIFY2(slow.start(dir.path(),
                        QJsonObject{{"repos", QJsonArray{repo}}, {"throttleBytesPerS", 2000000}},
                        &error),
             qPrintable(error));
    qputenv("HF_ENDPOINT", slow.endpoint().toUtf8());
    const QString models = QDir(dir.path()).filePath("models");
    {
      ModelsPage page(models, QDir(dir.path()).filePath("node"), {});
      HubSearchPanel* panel = page.discover();
      QSignalSpy searched(panel, &HubSearchPanel::searchShown);
      panel->search();
      QVERIFY(searched.wait(kTimeoutMs));
      QSignalSpy listed(panel, &HubSearchPanel::modelsShown);
      panel->selectRepo(0);
      QVERIFY(listed.wait(kTimeoutMs));
      panel->selectModel(0);
      panel->downloadSelected();
      DownloadRow* row = panel->downloadRow();
      QCOMPARE(row->state(), DownloadRow::State::Running);
      QTRY_VERIFY_WITH_TIMEOUT(child<QLabel>(row, "downloadRate")->text().contains("MiB/s"),
                               kTimeoutMs);
      row->pause();
      QTRY_COMPARE_WITH_TIMEOUT(row->state(), DownloadRow::State::Paused, kTimeoutMs);
      QVERIFY(!QDir(QDir(models).filePath(".partial")).isEmpty());  // kept for a resume
      row->resume();
      QCOMPARE(row->state(), DownloadRow::State::Running);
      // Cancel once the resumed transfer runs.
      QTRY_VERIFY_WITH_TIMEOUT(child<QLabel>(row, "downloadRate")->text().contains("MiB/s"),
                               kTimeoutMs);
      row->cancel();
      QTRY_COMPARE_WITH_TIMEOUT(row->state(), DownloadRow::State::Idle, kTimeoutMs);
      QTRY_VERIFY_WITH_TIMEOUT(QDir(QDir(models).filePath(".partial")).isEmpty(), kTimeoutMs);
      QVERIFY(!QFile::exists(QDir(models).filePath(kDefaultModel)));
      // The resumed transfer asked for the rest only.
      bool ranged = false;
      for (const QJsonObject& r : slow.requests()) {
        if (r["range"].isString() && !r["range"].toString().startsWith("bytes=0-")) ranged = true;
      }
      QVERIFY(ranged);
    }
    qputenv("HF_ENDPOINT", m_hub.endpoint().toUtf8());
  }

  void deleteRemovesEveryPartOfASplitModel() {
    QTemporaryDir models;
    const QDir d(models.path());
    for (const char* name :
         {"Big-Q8_0-00001-of-00002.gguf", "Big-Q8_0-00002-of-00002.gguf", "Other.gguf"}) {
      QVERIFY(shoal::testing::writeBytesFile(d.filePath(name), 1000, 3));
    }
    ModelManager m(models.path());
    QTRY_VERIFY(m.rowOf("Big-Q8_0-00002-of-00002.gguf") >= 0);
    m.selectRow(m.rowOf("Big-Q8_0-00002-of-00002.gguf"));
    QCOMPARE(m.selectedModelFiles().size(), 2);
    QTest::mouseClick(child<QPushButton>(&m, "deleteModelButton"), Qt::LeftButton);
    auto* box = child<QMessageBox>(&m, "deleteModelConfirm");
    QSignalSpy refreshed(&m, &ModelManager::refreshed);
    QTest::mouseClick(box->button(QMessageBox::Yes), Qt::LeftButton);
    QVERIFY(refreshed.wait(kTimeoutMs));
    QVERIFY(!QFile::exists(d.filePath("Big-Q8_0-00001-of-00002.gguf")));
    QVERIFY(!QFile::exists(d.filePath("Big-Q8_0-00002-of-00002.gguf")));
    QVERIFY(QFile::exists(d.filePath("Other.gguf")));
    QCOMPARE(m.rowOf("Other.gguf"), 0);
  }
};

QTEST_MAIN(TestModelsDiscover)
#include "test_models_discover.moc"
