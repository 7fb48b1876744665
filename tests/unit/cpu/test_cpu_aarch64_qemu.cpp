// The NEON kernel levels, on an x86 machine: the aarch64 cross build (scripts/build-aarch64)
// run under qemu-user, once as a CPU with the dot-product extension (QEMU_CPU=max: Isa::NeonDot
// and Isa::Neon) and once as a Cortex-A53 without it (Isa::Neon only, as on a Raspberry Pi 3/4).
//  * shoal-cpu-levels-check: every level against the scalar reference, bit for bit (the cases
//    of test_cpu_matrix_kernels);
//  * whole model runs: shoal-dump-tensors on the default model and on two small synthetic
//    models that together hold every weight type with a CPU kernel, a prompt as one batch and a
//    decode step after a prefix. Every intermediate tensor must be bit-identical to the host's
//    own run. With test_cpu_llamacpp_parity passing on the host, that is the llama.cpp parity
//    of the ARM build too.
// Skipped (and so failing scripts/test's check-test-set, which requires label qemu) when
// qemu-aarch64, the cross sysroot or the cross build is missing.

#include <QtTest>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

const QString kSysroot = QStringLiteral("/usr/aarch64-linux-gnu");

struct Run {
  int exitCode = -1;
  QString output;
};

// Runs a program to its end (five minutes at most), stdout and stderr together.
Run runProgram(const QString& program, const QStringList& args,
               const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(program, args);
  Run r;
  if (!p.waitForStarted(10000)) {
    r.output = program + ": " + p.errorString();
    return r;
  }
  if (!p.waitForFinished(300000)) {
    p.kill();
    p.waitForFinished();
    r.output = program + ": timed out";
    return r;
  }
  r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.output = QString::fromLocal8Bit(p.readAll());
  return r;
}

QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// The first tensor of index.json whose floats differ between two dumps, with its index.
QString firstDifferentTensor(const QString& indexPath, const QByteArray& a, const QByteArray& b) {
  const QByteArray index = readAll(indexPath);
  const auto json = nlohmann::json::parse(index.begin(), index.end(), nullptr, false);
  if (json.is_discarded()) return "index.json unreadable";
  for (const auto& t : json["tensors"]) {
    const qsizetype offset = t["offset"].get<qsizetype>() * 4;
    const qsizetype bytes = t["rows"].get<qsizetype>() * t["cols"].get<qsizetype>() * 4;
    if (a.mid(offset, bytes) != b.mid(offset, bytes)) {
      return QString::fromStdString(t["name"].get<std::string>());
    }
  }
  return a.size() != b.size() ? "sizes differ" : "none";
}

}  // namespace

class CpuAarch64QemuTest : public QObject {
  Q_OBJECT

  QString m_qemu;
  QString m_crossDir = QStringLiteral(SHOAL_AARCH64_BUILD_DIR);
  QTemporaryDir m_work;

  QProcessEnvironment emulatedCpu(const QString& cpu) const {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("QEMU_CPU", cpu);
    env.insert("QEMU_LD_PREFIX", kSysroot);
    env.remove("SHOAL_CPU_ISA");
    return env;
  }

  // The model a data row names: the default model, or a synthetic one initTestCase wrote (mix1
  // and mix2 between them hold every weight type with a CPU kernel).
  QString modelPath(const QString& name) const {
    if (name == "smollm2")
      return QStringLiteral(SHOAL_MODELS_DIR "/SmolLM2-135M-Instruct.Q4_1.gguf");
    return m_work.filePath(name + ".gguf");
  }

 private slots:
  void initTestCase() {
    m_qemu = QStandardPaths::findExecutable("qemu-aarch64");
    if (m_qemu.isEmpty()) QSKIP("qemu-aarch64 not found (install qemu-user: scripts/setup)");
    if (!QFileInfo(kSysroot + "/lib/ld-linux-aarch64.so.1").exists()) {
      QSKIP("no aarch64 sysroot in /usr/aarch64-linux-gnu (install g++-aarch64-linux-gnu)");
    }
    for (const char* tool : {"tests/cross/shoal-cpu-levels-check", "tools/shoal-dump-tensors"}) {
      if (!QFileInfo(m_crossDir + "/" + tool).isExecutable()) {
        QSKIP(qPrintable(
            QString("%1/%2 not built (run scripts/build-aarch64)").arg(m_crossDir, tool)));
      }
    }
    QVERIFY(m_work.isValid());
    // Small models (2 layers, 256 wide, 512 tokens): fast under emulation, yet every matrix has
    // several blocks (K-quant rows of 256 and 512) and the output head a few hundred rows.
    const QStringList shape = {"--layers",   "2", "--embd", "256", "--heads", "4",
                               "--kv-heads", "2", "--ff",   "512", "--vocab", "512"};
    const QList<QStringList> mixes = {
        {"--type", "q4_K", "--embed-type", "q8_0", "--type-of", "attn_q=q4_0", "--type-of",
         "attn_k=q4_1", "--type-of", "attn_v=q5_0", "--type-of", "attn_output=q5_1", "--type-of",
         "ffn_up=q5_K", "--type-of", "ffn_down=q6_K"},
        {"--type", "q2_K", "--embed-type", "f16", "--type-of", "attn_q=q3_K", "--type-of",
         "attn_k=iq4_xs", "--type-of", "attn_v=iq4_nl", "--type-of", "attn_output=bf16",
         "--type-of", "ffn_up=mxfp4", "--type-of", "ffn_down=f32"},
    };
    for (int i = 0; i < mixes.size(); ++i) {
      const Run r = runProgram(
          SHOAL_SYNTH_MODEL,
          shape + mixes[i] + QStringList{"--out", modelPath(QString("mix%1").arg(i + 1))});
      QVERIFY2(r.exitCode == 0, qPrintable(r.output));
    }
  }

  void kernelLevelsMatchReference_data() {
    QTest::addColumn<QString>("cpu");
    QTest::addColumn<QString>("levels");
    QTest::newRow("max") << "max"
                         << "levels: neon neondot";
    QTest::newRow("cortex-a53") << "cortex-a53"
                                << "levels: neon";
  }
  void kernelLevelsMatchReference() {
    QFETCH(QString, cpu);
    QFETCH(QString, levels);
    const Run r =
        runProgram(m_qemu, {m_crossDir + "/tests/cross/shoal-cpu-levels-check"}, emulatedCpu(cpu));
    QVERIFY2(r.exitCode == 0, qPrintable(r.output));
    QVERIFY2(r.output.startsWith(levels + "\n"), qPrintable(r.output));
    QVERIFY2(r.output.contains("all levels match the reference"), qPrintable(r.output));
  }

  void modelRunsMatchHost_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("cpu");
    QTest::addColumn<QStringList>("ids");
    // A 10-token batch (K-quants take the tiled order from 8 tokens) and one decode step; ids
    // below the synthetic models' 512 tokens.
    const QStringList batch = {"--ids", "1,504,306,314,253,134,30,198,2,9"};
    const QStringList step = {"--prefix", "1,504,306", "--ids", "314"};
    for (const char* model : {"smollm2", "mix1", "mix2"}) {
      for (const char* cpu : {"max", "cortex-a53"}) {
        QTest::newRow(qPrintable(QString("%1/%2/batch").arg(model, cpu))) << model << cpu << batch;
        QTest::newRow(qPrintable(QString("%1/%2/step").arg(model, cpu))) << model << cpu << step;
      }
    }
  }
  void modelRunsMatchHost() {
    QFETCH(QString, model);
    QFETCH(QString, cpu);
    QFETCH(QStringList, ids);
    const QString path = modelPath(model);
    if (!QFileInfo::exists(path)) QSKIP("default model absent (run scripts/setup)");
    const QString tag = QString(QTest::currentDataTag()).replace('/', '-');
    const QString hostDir = m_work.filePath(tag + "-host"), armDir = m_work.filePath(tag + "-arm");
    const QStringList args = QStringList{"--model", path, "--threads", "2"} + ids;
    const Run host = runProgram(SHOAL_DUMP_TENSORS, args + QStringList{"--out", hostDir});
    QVERIFY2(host.exitCode == 0, qPrintable(host.output));
    const Run arm = runProgram(
        m_qemu,
        QStringList{m_crossDir + "/tools/shoal-dump-tensors"} + args + QStringList{"--out", armDir},
        emulatedCpu(cpu));
    QVERIFY2(arm.exitCode == 0, qPrintable(arm.output));
    QCOMPARE(readAll(armDir + "/index.json"), readAll(hostDir + "/index.json"));
    const QByteArray a = readAll(armDir + "/tensors.f32"), h = readAll(hostDir + "/tensors.f32");
    QVERIFY(!h.isEmpty());
    QVERIFY2(a == h, qPrintable("first tensor that differs: " +
                                firstDifferentTensor(hostDir + "/index.json", a, h)));
  }
};

QTEST_GUILESS_MAIN(CpuAarch64QemuTest)
#include "test_cpu_aarch64_qemu.moc"
