// `shoal-cli models` run as a user runs it, against tests/hub/fake_hub.py through HF_ENDPOINT:
// search, files, pull (with a kill -9 mid-download and a resume), list (and its fit verdicts
// against what `generate` does), rm. HOME and the XDG
// dirs point into a temporary folder, so nothing touches the real user's files.

#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <memory>

#include "engine/gguf/gguf_writer.h"
#include "engine/model/synthetic_model.h"
#include "tests/hub/fake_hub_process.h"

using shoal::testing::FakeHubProcess;
using shoal::testing::sha256Of;
using shoal::testing::writeBytesFile;

namespace {

struct Run {
  int exitCode = -1;
  QByteArray out;
  QByteArray err;
};

QString defaultModel() { return QString(SHOAL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

QJsonObject sourceFile(const QString& path, const QString& source) {
  return QJsonObject{{"path", path}, {"source", source}};
}

}  // namespace

class TestCliModels : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir m_tmp;
  QString m_small;  // 200 000 bytes
  QString m_big;    // 1 000 000 bytes
  std::unique_ptr<FakeHubProcess> m_hub;

  QString models() const { return m_tmp.path() + "/data/shoal/models"; }

  QProcessEnvironment environment() const {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("HF_ENDPOINT", m_hub->endpoint());
    env.remove("HF_TOKEN");
    env.insert("HOME", m_tmp.path() + "/home");
    env.insert("XDG_DATA_HOME", m_tmp.path() + "/data");
    env.insert("XDG_CONFIG_HOME", m_tmp.path() + "/config");
    return env;
  }

  Run runCli(const QStringList& args) const {
    QProcess p;
    p.setProcessEnvironment(environment());
    p.start(SHOAL_CLI_PATH, args);
    if (!p.waitForStarted(10000)) return {};
    p.closeWriteChannel();
    p.waitForFinished(300000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, p.readAllStandardOutput(),
            p.readAllStandardError()};
  }

  void startHub(const QJsonObject& extra = {}) {
    QJsonArray repos{
        QJsonObject{{"id", "acme/Small-GGUF"},
                    {"downloads", 40},
                    {"lastModified", "2026-01-01T00:00:00.000Z"},
                    {"files", QJsonArray{sourceFile("small-Q4_0.gguf", m_small),
                                         sourceFile("small-Q8_0-00001-of-00002.gguf", m_small),
                                         sourceFile("small-Q8_0-00002-of-00002.gguf", m_big)}}},
        QJsonObject{{"id", "acme/Big-GGUF"},
                    {"downloads", 90},
                    {"lastModified", "2025-01-01T00:00:00.000Z"},
                    {"files", QJsonArray{sourceFile("big-F16.gguf", m_big)}}},
        QJsonObject{{"id", "acme/Gated-GGUF"},
                    {"downloads", 1},
                    {"gated", true},
                    {"files", QJsonArray{sourceFile("gated-Q4_0.gguf", m_small)}}},
    };
    if (QFile::exists(defaultModel())) {
      repos.append(QJsonObject{
          {"id", "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"},
          {"downloads", 5},
          {"files", QJsonArray{sourceFile("SmolLM2-135M-Instruct.Q4_1.gguf", defaultModel())}}});
    }
    QJsonObject config{{"repos", repos}, {"token", "hf_cli_token"}};
    for (auto it = extra.begin(); it != extra.end(); ++it) config[it.key()] = it.value();
    m_hub = std::make_unique<FakeHubProcess>();
    QString error;
    QVERIFY2(m_hub->start(m_tmp.path(), config, &error), qPrintable(error));
  }

  bool hubSawRange(const QString& pathPart, const QString& range) const {
    for (const QJsonObject& r : m_hub->requests()) {
      if (r["path"].toString().contains(pathPart) && r["range"].toString() == range) return true;
    }
    return false;
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_tmp.isValid());
    m_small = m_tmp.path() + "/small.bin";
    m_big = m_tmp.path() + "/big.bin";
    QVERIFY(writeBytesFile(m_small, 200000, 11));
    QVERIFY(writeBytesFile(m_big, 1000000, 12));
  }

  void cleanup() { m_hub.reset(); }

  void searchPrintsJsonSortedByDownloads() {
    startHub();
    const Run r = runCli({"models", "search", "gguf", "--json"});
    QCOMPARE(r.exitCode, 0);
    const QJsonArray found = QJsonDocument::fromJson(r.out).array();
    QVERIFY2(found.size() >= 3, r.out.constData());
    QCOMPARE(found[0].toObject()["id"].toString(), QString("acme/Big-GGUF"));
    QCOMPARE(found[0].toObject()["downloads"].toInt(), 90);
    QCOMPARE(found[1].toObject()["id"].toString(), QString("acme/Small-GGUF"));
    const Run recent = runCli({"models", "search", "acme", "--sort", "recent", "--json"});
    QCOMPARE(recent.exitCode, 0);
    QCOMPARE(QJsonDocument::fromJson(recent.out).array()[0].toObject()["id"].toString(),
             QString("acme/Small-GGUF"));
    const Run bad = runCli({"models", "search", "x", "--sort", "sideways"});
    QCOMPARE(bad.exitCode, 2);
  }

  void filesListsModelsWithSplitParts() {
    startHub();
    const Run r = runCli({"models", "files", "acme/Small-GGUF", "--json", "--no-fit"});
    QCOMPARE(r.exitCode, 0);
    const QJsonArray models = QJsonDocument::fromJson(r.out).array();
    QCOMPARE(models.size(), 2);
    const QJsonObject single = models[0].toObject();
    QCOMPARE(single["name"].toString(), QString("small-Q4_0.gguf"));
    QCOMPARE(single["quantization"].toString(), QString("Q4_0"));
    QCOMPARE(single["bytes"].toInteger(), qint64{200000});
    QVERIFY(!single.contains("fit"));
    const QJsonObject split = models[1].toObject();
    QCOMPARE(split["name"].toString(), QString("small-Q8_0-00001-of-00002.gguf"));
    QCOMPARE(split["parts"].toArray().size(), 2);
    QCOMPARE(split["bytes"].toInteger(), qint64{1200000});
    QCOMPARE(split["parts"].toArray()[0].toObject()["sha256"].toString(), sha256Of(m_small));
  }

  void filesEstimatesTheFitFromAHeaderRange() {
    if (!QFile::exists(defaultModel())) QSKIP("default model absent (run scripts/setup)");
    startHub();
    const Run r = runCli({"models", "files", "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "--json"});
    QCOMPARE(r.exitCode, 0);
    const QJsonArray models = QJsonDocument::fromJson(r.out).array();
    QCOMPARE(models.size(), 1);
    const QJsonObject fit = models[0].toObject()["fit"].toObject();
    QVERIFY2(fit.contains("runs"), r.out.constData());  // an estimate, not an error
    QCOMPARE(fit["architecture"].toString(), QString("llama"));
    // Only the header was fetched: a Range request from byte 0.
    QVERIFY(hubSawRange("SmolLM2-135M-Instruct.Q4_1.gguf", "bytes=0-4194303"));
  }

  void pullListAndRmAModel() {
    startHub();
    const Run pull = runCli({"models", "pull", "acme/Small-GGUF", "small-Q4_0.gguf", "--json"});
    QVERIFY2(pull.exitCode == 0, pull.err.constData());
    const QJsonObject result = QJsonDocument::fromJson(pull.out).object();
    QCOMPARE(result["path"].toString(), models() + "/small-Q4_0.gguf");
    QCOMPARE(result["bytes"].toInteger(), qint64{200000});
    QVERIFY(result["sha256_verified"].toBool());
    QCOMPARE(sha256Of(models() + "/small-Q4_0.gguf"), sha256Of(m_small));

    const Run split = runCli({"models", "pull", "acme/Small-GGUF", "small-Q8_0-00001-of-00002.gguf",
                              "--dir", models(), "--json"});
    QVERIFY2(split.exitCode == 0, split.err.constData());
    QVERIFY(QFile::exists(models() + "/small-Q8_0-00002-of-00002.gguf"));

    const Run list = runCli({"models", "list", "--json"});
    QCOMPARE(list.exitCode, 0);
    const QJsonArray local = QJsonDocument::fromJson(list.out).array();
    QCOMPARE(local.size(), 2);
    QCOMPARE(local[0].toObject()["name"].toString(), QString("small-Q4_0.gguf"));
    QVERIFY(local[0].toObject().contains("error"));  // random bytes: no GGUF header
    QCOMPARE(local[1].toObject()["parts"].toInt(), 2);
    QCOMPARE(local[1].toObject()["bytes"].toInteger(), qint64{1200000});

    QCOMPARE(runCli({"models", "rm", "../small-Q4_0.gguf"}).exitCode, 2);
    QCOMPARE(runCli({"models", "rm", "nothing.gguf"}).exitCode, 2);
    QCOMPARE(runCli({"models", "rm", "small-Q8_0-00001-of-00002.gguf"}).exitCode, 0);
    QVERIFY(!QFile::exists(models() + "/small-Q8_0-00001-of-00002.gguf"));
    QVERIFY(!QFile::exists(models() + "/small-Q8_0-00002-of-00002.gguf"));
    QCOMPARE(runCli({"models", "rm", "small-Q4_0.gguf"}).exitCode, 0);
    QCOMPARE(QJsonDocument::fromJson(runCli({"models", "list", "--json"}).out).array().size(), 0);
  }

  void listReadsTheArchitectureFromTheHeader() {
    if (!QFile::exists(defaultModel())) QSKIP("default model absent (run scripts/setup)");
    startHub();
    const QString dir = m_tmp.path() + "/listed";
    const Run pull = runCli({"models", "pull", "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
                             "SmolLM2-135M-Instruct.Q4_1.gguf", "--dir", dir});
    QVERIFY2(pull.exitCode == 0, pull.err.constData());
    const Run list = runCli({"models", "list", "--dir", dir, "--json"});
    const QJsonObject m = QJsonDocument::fromJson(list.out).array()[0].toObject();
    QCOMPARE(m["architecture"].toString(), QString("llama"));
    QCOMPARE(m["quantization"].toString(), QString("Q4_1"));
    QVERIFY(!m.contains("error"));
  }

  // The verdict `models list` gives for each local file (plan::estimateFit on this computer) is
  // what loading it does: the default model and a synthetic one run, a file of an architecture
  // Shoal does not implement is refused — by `generate` as by the estimate.
  void listFitAgreesWithWhatGenerateDoes() {
    if (!QFile::exists(defaultModel())) QSKIP("default model absent (run scripts/setup)");
    startHub();  // the CLI's environment names it; nothing here asks it anything
    const QString dir = m_tmp.path() + "/fit";
    QVERIFY(QDir().mkpath(dir));
    QVERIFY(QFile::link(defaultModel(), dir + "/SmolLM2-135M-Instruct.Q4_1.gguf"));
    shoal::model::SyntheticModelSpec spec;
    spec.nLayer = 2;
    spec.nEmbd = 256;
    spec.nHead = 4;
    spec.nHeadKv = 2;
    spec.nFf = 512;
    spec.nVocab = 400;
    shoal::model::writeSyntheticModel(spec, (dir + "/synthetic-Q8_0.gguf").toStdString());
    shoal::gguf::Writer mamba;
    mamba.set("general.architecture", shoal::gguf::Value::string("mamba"));
    mamba.addTensor("token_embd.weight", shoal::gguf::TensorType::F32, {4, 2},
                    std::vector<uint8_t>(32));
    mamba.write((dir + "/mamba-F32.gguf").toStdString());

    const Run list = runCli({"models", "list", "--dir", dir, "--json"});
    QVERIFY2(list.exitCode == 0, list.err.constData());
    const QJsonArray listed = QJsonDocument::fromJson(list.out).array();
    QCOMPARE(listed.size(), 3);
    int runs = 0;
    for (const QJsonValue& v : listed) {
      const QJsonObject m = v.toObject();
      const QJsonObject fit = m["fit"].toObject();
      QVERIFY2(fit.contains("runs"), qPrintable(m["name"].toString()));
      const bool predicted = fit["runs"].toBool();
      runs += predicted;
      const Run gen = runCli({"generate", "-m", m["path"].toString(), "-p", "Hello", "-n", "2",
                              "--temp", "0", "--threads", "1"});
      QVERIFY2((gen.exitCode == 0) == predicted,
               qPrintable(m["name"].toString() + ": predicted " + (predicted ? "runs" : "refused") +
                          " (" + fit["reason"].toString() + "), generate exited " +
                          QString::number(gen.exitCode) + ": " + gen.err));
      if (m["name"].toString().startsWith("mamba")) {
        QVERIFY(fit["reason"].toString().contains("unsupported architecture 'mamba'"));
      }
    }
    QCOMPARE(runs, 2);
  }

  void killedPullResumesWithARange() {
    startHub({{"throttleBytesPerS", 250000}});
    const QString dir = m_tmp.path() + "/killed";
    const QString part = dir + "/.partial/big-F16.gguf.part";
    QProcess p;
    p.setProcessEnvironment(environment());
    p.start(SHOAL_CLI_PATH, {"models", "pull", "acme/Big-GGUF", "big-F16.gguf", "--dir", dir});
    QVERIFY(p.waitForStarted(10000));
    QDeadlineTimer deadline(60000);
    while (QFileInfo(part).size() < 100000 && !deadline.hasExpired() &&
           p.state() == QProcess::Running) {
      QThread::msleep(20);
    }
    QCOMPARE(p.state(), QProcess::Running);
    p.kill();  // SIGKILL: no clean-up of any kind
    QVERIFY(p.waitForFinished(10000));
    const qint64 kept = QFileInfo(part).size();
    QVERIFY2(kept >= 100000 && kept < 1000000, qPrintable(QString::number(kept)));
    QVERIFY(!QFile::exists(dir + "/big-F16.gguf"));

    // A new server process (unthrottled, another port) and a new pull continue from the part.
    startHub();
    const Run again = runCli({"models", "pull", "acme/Big-GGUF", "big-F16.gguf", "--dir", dir});
    QVERIFY2(again.exitCode == 0, again.err.constData());
    QVERIFY(hubSawRange("/resolve/main/big-F16.gguf", "bytes=" + QString::number(kept) + "-"));
    QCOMPARE(sha256Of(dir + "/big-F16.gguf"), sha256Of(m_big));
    QVERIFY(!QFile::exists(part));
  }

  void gatedPullIsAOneLineErrorNamingHfToken() {
    startHub();
    const Run r = runCli({"models", "pull", "acme/Gated-GGUF", "gated-Q4_0.gguf"});
    QCOMPARE(r.exitCode, 2);
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY2(r.err.contains("HF_TOKEN"), r.err.constData());
    const Run unknown = runCli({"models", "pull", "acme/Small-GGUF", "nope.gguf"});
    QCOMPARE(unknown.exitCode, 2);
    QVERIFY2(unknown.err.contains("nope.gguf"), unknown.err.constData());
  }
};

QTEST_GUILESS_MAIN(TestCliModels)
#include "test_cli_models.moc"
