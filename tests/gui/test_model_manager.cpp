// The Models page lists the GGUF files of the models directory from their headers, says why a
// file cannot run (unreadable, unsupported architecture, too big for the free memory and by how
// much), adds a file to the directory, and loads the selected model on the engine thread.

#include <QDir>
#include <QFile>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <cstring>

#include "app/gui/app_settings.h"
#include "app/gui/chat_engine.h"
#include "app/gui/chat_window.h"
#include "app/gui/model_catalog.h"
#include "app/gui/model_manager.h"
#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_model.h"

using namespace shoal::gui;

namespace {

constexpr int kLoadTimeoutMs = 120000;
const char* const kDefaultModel = "SmolLM2-135M-Instruct.Q4_1.gguf";

QString modelPath() { return QDir(SHOAL_MODELS_DIR).filePath(kDefaultModel); }

// A well-formed GGUF whose architecture Shoal does not implement.
QString writeUnsupportedModel(const QDir& dir) {
  shoal::gguf::Writer w;
  w.set("general.architecture", shoal::gguf::Value::string("mamba"));
  w.set("general.file_type", shoal::gguf::Value::u32(1));
  w.set("mamba.block_count", shoal::gguf::Value::u32(2));
  w.set("mamba.context_length", shoal::gguf::Value::u32(1024));
  std::vector<uint8_t> bytes(16 * 4 * sizeof(float));
  w.addTensor("token_embd.weight", shoal::gguf::TensorType::F32, {16, 4}, bytes);
  const QString path = dir.filePath("unsupported-mamba.gguf");
  w.write(path.toStdString());
  return path;
}

// What the engine itself says about a file it cannot run.
QString engineReason(const QString& path) {
  try {
    const auto file = shoal::gguf::File::open(path.toStdString());
    shoal::model::ModelConfig::fromGguf(file);
  } catch (const shoal::Error& e) {
    return QString::fromStdString(e.what());
  }
  return {};
}

// The manager reads the directory off the GUI thread: wait for the table.
bool scanned(ModelManager& m) {
  QSignalSpy done(&m, &ModelManager::refreshed);
  return done.wait(kLoadTimeoutMs);
}

QString detailsOf(ModelManager& m, const QString& fileName) {
  const int row = m.rowOf(fileName);
  if (row < 0) return {};
  m.selectRow(row);
  return m.findChild<QLabel*>("modelDetails")->text();
}

}  // namespace

class TestModelManager : public QObject {
  Q_OBJECT

 private slots:
  void anUnsupportedArchitectureIsListedWithTheReason() {
    QTemporaryDir dir;
    const QString path = writeUnsupportedModel(QDir(dir.path()));
    const QString reason = engineReason(path);
    QVERIFY(reason.contains("mamba"));

    ModelManager m(dir.path());
    QVERIFY(scanned(m));
    const int row = m.rowOf("unsupported-mamba.gguf");
    QVERIFY(row >= 0);
    QCOMPARE(m.entries()[row].architecture, QString("mamba"));
    QCOMPARE(m.entries()[row].quantization, QString("F16"));
    QVERIFY(!m.entries()[row].runnable);
    const QString details = detailsOf(m, "unsupported-mamba.gguf");
    QVERIFY2(details.contains(reason), qPrintable(details));
    QVERIFY(!m.findChild<QPushButton*>("loadModelButton")->isEnabled());
    auto* table = m.findChild<QTableWidget*>("modelTable");
    QCOMPARE(table->item(row, 7)->text(), QString("Cannot run"));
  }

  // A mixture of experts is listed with its expert counts and its active parameters.
  void aMixtureOfExpertsShowsItsExpertsAndActiveParameters() {
    QTemporaryDir dir;
    shoal::model::SyntheticModelSpec spec;
    spec.architecture = "qwen3moe";
    spec.nVocab = 300;
    spec.nEmbd = 64;
    spec.nFf = 128;
    spec.nExpert = 8;
    spec.nExpertUsed = 2;
    shoal::model::writeSyntheticModel(spec, QDir(dir.path()).filePath("moe.gguf").toStdString());
    ModelManager m(dir.path());
    QVERIFY(scanned(m));
    const int row = m.rowOf("moe.gguf");
    QVERIFY(row >= 0);
    const ModelEntry& e = m.entries()[row];
    QVERIFY2(e.runnable, qPrintable(e.problem));
    QCOMPARE(e.experts, 8);
    QCOMPARE(e.expertsUsed, 2);
    // 2 layers x 3 expert tensors x 8 experts x 64 x 64 (qwen3moe's expert width: ff / top-k).
    const qint64 expertWeights = 2 * 3 * 8 * 64 * 64;
    QCOMPARE(e.parameters - e.activeParameters, expertWeights / 8 * 6);
    auto* table = m.findChild<QTableWidget*>("modelTable");
    QVERIFY(table->item(row, 1)->text().contains("8 experts (2 per token)"));
    QVERIFY(table->item(row, 6)->text().contains("active"));
  }

  void aMalformedFileIsListedWithTheReadersError() {
    QTemporaryDir dir;
    const QString path = QDir(dir.path()).filePath("truncated.gguf");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("GGUF\x03\x00\x00\x00", 8);  // the magic and version, then nothing
    f.close();
    QString reason;
    try {
      shoal::gguf::File::open(path.toStdString());
    } catch (const shoal::Error& e) {
      reason = QString::fromStdString(e.what());
    }
    QVERIFY(!reason.isEmpty());

    ModelManager m(dir.path());
    QVERIFY(scanned(m));
    QVERIFY(m.rowOf("truncated.gguf") >= 0);
    const QString details = detailsOf(m, "truncated.gguf");
    QVERIFY2(details.contains(reason), qPrintable(details));
  }

  void theDefaultModelIsListedWithItsHeaderFacts() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    const auto file = shoal::gguf::File::open(modelPath().toStdString());
    const auto config = shoal::model::ModelConfig::fromGguf(file);

    ModelManager m(SHOAL_MODELS_DIR);
    QVERIFY(scanned(m));
    const int row = m.rowOf(kDefaultModel);
    QVERIFY(row >= 0);
    const ModelEntry& e = m.entries()[row];
    QCOMPARE(e.architecture, QString("llama"));
    QCOMPARE(e.quantization, QString("Q4_1"));
    QCOMPARE(e.layers, config.nLayer);
    QCOMPARE(e.contextLength, config.nCtxTrain);
    QCOMPARE(e.fileBytes, QFileInfo(modelPath()).size());
    QVERIFY(e.weightBytes > 0 && e.weightBytes < static_cast<quint64>(e.fileBytes));
    QVERIFY2(e.runnable, qPrintable(e.problem));
    QVERIFY(detailsOf(m, kDefaultModel).contains("KV cache"));
  }

  void aModelThatDoesNotFitSaysByHowMuch() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    const quint64 free = 1 << 20;
    const ModelEntry e = describeModel(modelPath(), free);
    QVERIFY(!e.runnable);
    QVERIFY(e.kvCacheBytes > 0);
    QVERIFY2(e.problem.contains("Does not fit"), qPrintable(e.problem));
    const quint64 shortBy = e.weightBytes + e.kvCacheBytes - free;
    QVERIFY2(e.problem.contains(formatBytes(shortBy) + " short"), qPrintable(e.problem));
  }

  void addingAFilePutsItInTheModelsDirectory() {
    QTemporaryDir source;
    QTemporaryDir models;
    const QString path = writeUnsupportedModel(QDir(source.path()));
    ModelManager m(models.path());
    QVERIFY(scanned(m));
    QCOMPARE(m.entries().size(), 0);
    m.addModelFile(path);
    QTRY_VERIFY(m.rowOf("unsupported-mamba.gguf") >= 0);
    QVERIFY(QFile::exists(QDir(models.path()).filePath("unsupported-mamba.gguf")));
  }

  void loadButtonLoadsTheSelectedModel() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    QTemporaryDir data;
    qputenv("SHOAL_DATA_DIR", data.path().toLocal8Bit());
    AppSettings s = AppSettings::load();
    s.modelsDir = SHOAL_MODELS_DIR;
    s.save();
    ChatWindow w(QDir(data.path()).filePath("none.gguf"), data.path());
    QSignalSpy started(w.engine(), &ChatEngine::loadStarted);
    QTRY_VERIFY(w.findChild<QLabel*>("banner")->isVisibleTo(&w));  // the missing file failed
    QVERIFY(!w.isModelLoaded());
    QVERIFY(w.showPage("models"));
    ModelManager* m = w.modelManager();
    QTRY_VERIFY(m->rowOf(kDefaultModel) >= 0);
    m->selectRow(m->rowOf(kDefaultModel));
    auto* load = m->findChild<QPushButton*>("loadModelButton");
    QVERIFY(load->isEnabled());
    QTest::mouseClick(load, Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(w.isModelLoaded(), kLoadTimeoutMs);
    QVERIFY(started.count() >= 1);
    QCOMPARE(started.last().at(0).toString(), m->entries()[m->rowOf(kDefaultModel)].path);
    QVERIFY(!m->findChild<QWidget*>("loadProgress")->isVisible());
    qunsetenv("SHOAL_DATA_DIR");
  }
};

QTEST_MAIN(TestModelManager)
#include "test_model_manager.moc"
