// shoal-cli's contract, run as a user runs it: exit codes, one-line errors, and the JSON shapes
// other tools and checks rely on.

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

namespace {

struct Run {
  int exitCode = -1;
  QByteArray out;
  QByteArray err;
};

Run runCli(const QStringList& args, const QByteArray& stdinData = {},
           const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.start(SHOAL_CLI_PATH, args);
  if (!p.waitForStarted(10000)) return {};
  if (!stdinData.isEmpty()) p.write(stdinData);
  p.closeWriteChannel();
  p.waitForFinished(300000);
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, p.readAllStandardOutput(),
          p.readAllStandardError()};
}

QString modelPath() { return QString(SHOAL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

// A bad-input failure: exit code 2 and exactly one line on stderr naming the problem.
void verifyOneLineError(const Run& r, const char* mentions) {
  QCOMPARE(r.exitCode, 2);
  QCOMPARE(r.err.count('\n'), 1);
  QVERIFY2(r.err.startsWith("shoal-cli: error: "), r.err.constData());
  QVERIFY2(r.err.contains(mentions), r.err.constData());
}

}  // namespace

class TestCliContract : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (!QFile::exists(modelPath())) QSKIP("default model absent (run scripts/setup)");
  }

  void unknownOptionIsAOneLineErrorWithExitCode2() {
    verifyOneLineError(runCli({"generate", "-p", "hi", "--no-such-option"}), "--no-such-option");
  }

  void unknownCommandIsAOneLineErrorWithExitCode2() {
    verifyOneLineError(runCli({"frobnicate"}), "frobnicate");
  }

#ifdef SHOAL_CLI_HAS_NET_HELPER
  // `pool` and `models` run in shoal-cli-net (app/cli/net_helper.h): shoal-cli execs it with the
  // same arguments, so its commands, help and errors read as shoal-cli's own.
  void poolAndModelsRunInTheHelper() {
    const Run help = runCli({"pool", "--help"});
    QCOMPARE(help.exitCode, 0);
    QVERIFY2(help.out.contains("shoal-cli pool") && help.out.contains("discover"),
             help.out.constData());
    QCOMPARE(runCli({"models", "--help"}).exitCode, 0);
    verifyOneLineError(runCli({"pool", "discover", "--no-such-option"}), "--no-such-option");
    // The top-level help still lists both.
    const Run top = runCli({"--help"});
    QVERIFY(top.out.contains("pool") && top.out.contains("models"));
  }

  void aMissingHelperIsAOneLineError() {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("SHOAL_CLI_NET", "/nonexistent/shoal-cli-net");
    const Run r = runCli({"pool", "discover"}, {}, env);
    QCOMPARE(r.exitCode, 1);
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY2(r.err.startsWith("shoal-cli: error: ") && r.err.contains("shoal-cli-net"),
             r.err.constData());
  }
#endif

  void missingModelFileIsAOneLineError() {
    verifyOneLineError(runCli({"info", "-m", "/nonexistent/model.gguf"}),
                       "/nonexistent/model.gguf");
  }

  void malformedModelFileIsAOneLineError() {
    QTemporaryDir dir;
    const QString path = dir.filePath("bad.gguf");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f", 16);  // absurd tensor count
    f.close();
    verifyOneLineError(runCli({"generate", "-m", path, "-p", "hi"}), "bad.gguf");
  }

  void tokenizePrintsAJsonArrayOfIds() {
    const Run r = runCli({"tokenize", "-p", "The capital of France is"});
    QCOMPARE(r.exitCode, 0);
    const QJsonArray ids = QJsonDocument::fromJson(r.out).array();
    QCOMPARE(ids.size(), 5);
    QCOMPARE(ids[0].toInt(), 504);  // llama.cpp's ids for this text (tests/fixtures)
  }

  void logitsPrintsTopKSortedDescending() {
    const Run r = runCli({"logits", "-p", "The capital of France is", "--top", "5"});
    QCOMPARE(r.exitCode, 0);
    const QJsonArray top = QJsonDocument::fromJson(r.out).object()["top"].toArray();
    QCOMPARE(top.size(), 5);
    for (int i = 1; i < top.size(); ++i) {
      QVERIFY(top[i - 1].toArray()[1].toDouble() >= top[i].toArray()[1].toDouble());
    }
  }

  // A GPU backend whose device lacks the memory for the model takes the layers that fit and the
  // CPU the rest, said in one note on stderr (a memory limit stands in for a small GPU); one
  // that cannot hold even the embedding and a layer is a one-line error; --gpu-layers chooses
  // the split, and needs a GPU backend.
  void gpuBackendSplitsAModelThatDoesNotFitWithTheCpu() {
    const QStringList prompt = {"-p", "The capital of France is", "-n", "6", "--temp", "0"};
    const Run split =
        runCli(QStringList{"generate", "--backend", "vulkan", "--gpu-memory", "60"} + prompt);
    if (split.exitCode == 1 && split.err.contains("unavailable")) {
      QSKIP(qPrintable("no Vulkan device: " + QString::fromUtf8(split.err)));
    }
    QCOMPARE(split.exitCode, 0);
    QVERIFY(!split.out.isEmpty());
    QCOMPARE(split.err.count('\n'), 1);
    QVERIFY2(split.err.startsWith("note: vulkan0 takes layers 0-") &&
                 split.err.contains("the CPU the rest (the model needs") &&
                 split.err.contains("the device has 60 MiB free"),
             split.err.constData());

    const Run tooSmall =
        runCli(QStringList{"generate", "--backend", "vulkan", "--gpu-memory", "1"} + prompt);
    QCOMPARE(tooSmall.exitCode, 1);
    QCOMPARE(tooSmall.err.count('\n'), 1);
    QVERIFY2(tooSmall.err.contains("less than the embedding and one layer need"),
             tooSmall.err.constData());

    const Run chosen =
        runCli(QStringList{"generate", "--backend", "vulkan", "--gpu-layers", "4"} + prompt);
    QCOMPARE(chosen.exitCode, 0);
    QVERIFY2(chosen.err.startsWith("note: vulkan0 takes layers 0-3 of 30, the CPU the rest"),
             chosen.err.constData());
    verifyOneLineError(runCli(QStringList{"generate", "--gpu-layers", "4"} + prompt),
                       "--gpu-layers needs a GPU backend");
  }

  void greedyGenerationIsDeterministic() {
    const QStringList args = {"generate", "-p", "Once upon a time", "-n", "8", "--temp", "0"};
    const Run a = runCli(args);
    const Run b = runCli(args);
    QCOMPARE(a.exitCode, 0);
    QVERIFY(!a.out.isEmpty());
    QCOMPARE(a.out, b.out);
  }

  void sameSeedSameSampledOutput() {
    const QStringList args = {"generate", "-p",  "Once upon a time", "-n",  "8",
                              "--temp",   "1.0", "--seed",           "1234"};
    const Run a = runCli(args);
    const Run b = runCli(args);
    QCOMPARE(a.exitCode, 0);
    QCOMPARE(a.out, b.out);
  }

  void chatReadsPipedLinesAndHonoursCommands() {
    const Run r =
        runCli({"chat", "--temp", "0", "-n", "8"}, "Hello\n/reset\nHi again\n/quit\nignored\n");
    QCOMPARE(r.exitCode, 0);
    QCOMPARE(r.out.count('\n'), 2);  // one line per reply; nothing after /quit
    QVERIFY(r.err.contains("reset"));
  }

  void infoJsonDescribesTheModel() {
    const Run r = runCli({"info", "--json"});
    QCOMPARE(r.exitCode, 0);
    const QJsonObject o = QJsonDocument::fromJson(r.out).object();
    QCOMPARE(o["architecture"].toString(), QString("llama"));
    QCOMPARE(o["layers"].toInt(), 30);
    QCOMPARE(o["chat_template"].toString(), QString("chatml"));
    // f16 keys and values of 30 layers x 3 KV heads x 64 dims at the 8192 trained positions.
    QCOMPARE(o["kv_cache_bytes"].toDouble(), 2.0 * 2 * 30 * 3 * 64 * 8192);
    QCOMPARE(o["kv_ring_layers"].toInt(), 0);
  }

  void benchPrintsMedianTokensPerSecond() {
    const Run r = runCli({"bench", "-p", "8", "-n", "4", "-r", "1"});
    QCOMPARE(r.exitCode, 0);
    const QJsonObject o = QJsonDocument::fromJson(r.out).object();
    const QJsonArray results = o["results"].toArray();
    QCOMPARE(results.size(), 2);
    QCOMPARE(results[0].toObject()["test"].toString(), QString("pp8"));
    QVERIFY(results[1].toObject()["tokens_per_s_median"].toDouble() > 0);
    QVERIFY(o["peak_rss_bytes"].toDouble() > 0);
  }

  // --depth D measures both tests after D cached positions (llama-bench's -d).
  void benchMeasuresAtADepth() {
    const Run r = runCli({"bench", "-p", "8", "-n", "4", "-r", "2", "-d", "40"});
    QCOMPARE(r.exitCode, 0);
    const QJsonObject o = QJsonDocument::fromJson(r.out).object();
    const QJsonArray results = o["results"].toArray();
    QCOMPARE(results.size(), 2);
    QCOMPARE(results[0].toObject()["test"].toString(), QString("pp8@d40"));
    QCOMPARE(results[1].toObject()["test"].toString(), QString("tg4@d40"));
    QCOMPARE(results[1].toObject()["depth"].toInt(), 40);
    QVERIFY(results[1].toObject()["tokens_per_s_median"].toDouble() > 0);
    QVERIFY(o["context"].toInt() >= 40 + 8);
  }

  // --sequences S decodes S sequences together (llama-batched-bench's S_TG); the prompt test is
  // unchanged.
  void benchDecodesSeveralSequencesTogether() {
    const Run r = runCli({"bench", "-p", "8", "-n", "4", "-r", "1", "-d", "6", "--sequences", "3"});
    QCOMPARE(r.exitCode, 0);
    const QJsonObject o = QJsonDocument::fromJson(r.out).object();
    const QJsonArray results = o["results"].toArray();
    QCOMPARE(results.size(), 2);
    QCOMPARE(results[0].toObject()["sequences"].toInt(), 1);
    QCOMPARE(results[1].toObject()["test"].toString(), QString("tg4x3@d6"));
    QCOMPARE(results[1].toObject()["sequences"].toInt(), 3);
    QVERIFY(results[1].toObject()["tokens_per_s_median"].toDouble() > 0);
    verifyOneLineError(runCli({"bench", "--sequences", "0"}), "sequences");
  }

  // bench --profile times every GPU kernel of a generation run (timestamp queries) and counts
  // the weight bytes the kernels read per token, which must be what a token needs: each matrix
  // once (within 5%). On the CPU backend it is a one-line error.
  void benchProfileTimesKernelsAndWeightReads() {
    const Run r =
        runCli({"bench", "--backend", "vulkan", "--profile", "-p", "0", "-n", "2", "-r", "1"});
    if (r.exitCode == 1 && r.err.contains("unavailable")) QSKIP("no Vulkan device");
    QCOMPARE(r.exitCode, 0);
    const QJsonObject profile = QJsonDocument::fromJson(r.out).object()["profile"].toObject();
    const QJsonArray kernels = profile["kernels"].toArray();
    QVERIFY(!kernels.isEmpty());
    double share = 0;
    bool sawProduct = false;
    for (const auto& k : kernels) {
      const QJsonObject row = k.toObject();
      QVERIFY(row["us_per_token"].toDouble() >= 0);
      share += row["share"].toDouble();
      sawProduct = sawProduct || row["kernel"].toString().startsWith("matvec");
    }
    QVERIFY(sawProduct);
    QVERIFY(std::abs(share - 1.0) < 1e-6);
    const double ratio = profile["weight_read_ratio"].toDouble();
    QVERIFY2(ratio > 0.95 && ratio < 1.05, qPrintable(QString::number(ratio)));
    verifyOneLineError(runCli({"bench", "--profile", "-p", "0", "-n", "2", "-r", "1"}),
                       "--profile needs a GPU stage");
  }
};

QTEST_GUILESS_MAIN(TestCliContract)
#include "test_cli_contract.moc"
