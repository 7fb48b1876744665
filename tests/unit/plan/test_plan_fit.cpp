// Fit before download: estimateFit answers "does it run on these devices, and how fast" from a
// GGUF header alone — the same answer for the whole file and for the prefix a Range request
// fetched — and says why not in words a person can act on.

#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <iterator>

#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/synthetic_model.h"
#include "engine/plan/fit.h"
#include "engine/plan/model_cost.h"

using namespace shoal;

namespace {

model::SyntheticModelSpec smallSpec() {
  model::SyntheticModelSpec s;
  s.nLayer = 4;
  s.nEmbd = 256;
  s.nHead = 4;
  s.nHeadKv = 2;
  s.nFf = 512;
  s.nVocab = 300;
  s.nCtx = 1024;
  s.weightType = gguf::TensorType::Q4_0;
  s.embedType = gguf::TensorType::Q8_0;
  return s;
}

std::vector<uint8_t> readAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

plan::Device cpu(const std::string& id, const std::string& node, double memoryBytes) {
  return plan::Device{id, node, memoryBytes, 20e9, 100e9};
}

plan::Pool poolOf(std::vector<plan::Device> devices) {
  plan::Pool p;
  p.devices = std::move(devices);
  return p;
}

}  // namespace

class PlanFitTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    m_path = std::filesystem::path(m_dir.path().toStdString()) / "small.gguf";
    model::writeSyntheticModel(smallSpec(), m_path);
  }

  void aModelThatFitsRunsWithAPredictedSpeed() {
    const gguf::File f = gguf::File::open(m_path);
    const plan::FitEstimate fit = plan::estimateFit(f, poolOf({cpu("cpu", "a", 8e9)}), 4096);
    QVERIFY2(fit.runs, fit.reason.c_str());
    QVERIFY(fit.reason.empty());
    QCOMPARE(fit.architecture, std::string("llama"));
    QCOMPARE(fit.stages, 1);
    QVERIFY(fit.tokensPerS > 0);
    QVERIFY(fit.weightBytes > 0);
    QVERIFY(fit.kvCacheBytes > 0);
  }

  void theContextIsCappedAtTheTrainedOne() {
    const gguf::File f = gguf::File::open(m_path);
    const auto fit = plan::estimateFit(f, poolOf({cpu("cpu", "a", 8e9)}), 4096);
    QCOMPARE(fit.contextTokens, int64_t{1024});
    const auto shorter = plan::estimateFit(f, poolOf({cpu("cpu", "a", 8e9)}), 512);
    QCOMPARE(shorter.contextTokens, int64_t{512});
    QCOMPARE(shorter.kvCacheBytes * 2, fit.kvCacheBytes);
  }

  void aHeaderPrefixGivesTheSameEstimateAsTheWholeFile() {
    const std::vector<uint8_t> bytes = readAll(m_path);
    const gguf::File whole = gguf::File::fromBuffer(bytes);
    // The tensor table ends well before the data; 64 KiB holds this model's header.
    const size_t prefix = std::min<size_t>(bytes.size(), 64 * 1024);
    QVERIFY(prefix < bytes.size());
    const gguf::File header =
        gguf::File::fromHeader(std::span(bytes.data(), prefix), bytes.size(), "small.gguf");
    const auto pool = poolOf({cpu("cpu", "a", 8e9)});
    const auto a = plan::estimateFit(whole, pool, 4096);
    const auto b = plan::estimateFit(header, pool, 4096);
    QVERIFY2(b.runs, b.reason.c_str());
    QCOMPARE(b.weightBytes, a.weightBytes);
    QCOMPARE(b.kvCacheBytes, a.kvCacheBytes);
    QCOMPARE(b.tokensPerS, a.tokensPerS);
  }

  void tooLittleMemorySaysHowMuchIsMissing() {
    const gguf::File f = gguf::File::open(m_path);
    const double need = plan::estimateFit(f, poolOf({cpu("cpu", "a", 8e9)}), 4096).weightBytes;
    const auto fit = plan::estimateFit(f, poolOf({cpu("cpu", "a", need / 4)}), 4096);
    QVERIFY(!fit.runs);
    QVERIFY(fit.missingBytes > 0);
    QCOMPARE(fit.tokensPerS, 0.0);
    QVERIFY2(fit.reason.find("missing") != std::string::npos, fit.reason.c_str());
    QCOMPARE(fit.availableBytes, need / 4);
  }

  void aModelTooLargeForOneDeviceRunsAcrossTwo() {
    const gguf::File f = gguf::File::open(m_path);
    const auto one = plan::estimateFit(f, poolOf({cpu("cpu", "a", 8e9)}), 4096);
    const double total = one.weightBytes + one.kvCacheBytes;
    const double each = total * 0.7;
    QVERIFY(!plan::estimateFit(f, poolOf({cpu("a/cpu", "a", each)}), 4096).runs);
    const auto two =
        plan::estimateFit(f, poolOf({cpu("a/cpu", "a", each), cpu("b/cpu", "b", each)}), 4096);
    QVERIFY2(two.runs, two.reason.c_str());
    QCOMPARE(two.stages, 2);
  }

  void aTiedEmbeddingIsCountedOnceWhenOneDeviceHoldsItAll() {
    // With a tied output the head reads token_embd: one stage holding both keeps it once, so
    // the file's bytes plus the KV cache are what it needs.
    model::SyntheticModelSpec spec = smallSpec();
    spec.tiedOutput = true;
    const auto path = std::filesystem::path(m_dir.path().toStdString()) / "tied.gguf";
    model::writeSyntheticModel(spec, path);
    const gguf::File f = gguf::File::open(path);
    const auto roomy = plan::estimateFit(f, poolOf({cpu("cpu", "a", 8e9)}), 4096);
    const double need = roomy.weightBytes + roomy.kvCacheBytes;
    QVERIFY2(plan::estimateFit(f, poolOf({cpu("cpu", "a", need * 1.001)}), 4096).runs,
             "the tied embedding was counted twice");
    const auto tight = plan::estimateFit(f, poolOf({cpu("cpu", "a", need * 0.99)}), 4096);
    QVERIFY(!tight.runs);
    QVERIFY(tight.missingBytes > 0 && tight.missingBytes < need * 0.011);
  }

  void anUnsupportedArchitectureIsNamed() {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::string("mamba"));
    w.addTensor("token_embd.weight", gguf::TensorType::F32, {4, 2}, std::vector<uint8_t>(32));
    const std::vector<uint8_t> bytes = w.toBytes();
    const gguf::File f = gguf::File::fromBuffer(bytes, "mamba.gguf");
    const auto fit = plan::estimateFit(f, poolOf({cpu("cpu", "a", 8e9)}), 4096);
    QVERIFY(!fit.runs);
    QCOMPARE(fit.architecture, std::string("mamba"));
    QVERIFY2(fit.reason.find("unsupported architecture 'mamba'") != std::string::npos,
             fit.reason.c_str());
  }

  void aSplitModelIsRefusedByName() {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::string("llama"));
    w.set("split.no", gguf::Value::u16(0));
    w.set("split.count", gguf::Value::u16(3));
    w.addTensor("token_embd.weight", gguf::TensorType::F32, {4, 2}, std::vector<uint8_t>(32));
    const std::vector<uint8_t> bytes = w.toBytes();
    const gguf::File f = gguf::File::fromBuffer(bytes, "m-00001-of-00003.gguf");
    const auto fit = plan::estimateFit(f, poolOf({cpu("cpu", "a", 8e9)}), 4096);
    QVERIFY(!fit.runs);
    QVERIFY2(fit.reason.find("split into 3 files") != std::string::npos, fit.reason.c_str());
  }

  void noDevicesIsAVerdictNotAThrow() {
    const gguf::File f = gguf::File::open(m_path);
    const auto fit = plan::estimateFit(f, plan::Pool{}, 4096);
    QVERIFY(!fit.runs);
    QVERIFY(!fit.reason.empty());
  }

  void bytesAreFormattedForPeople() {
    QCOMPARE(plan::formatBytes(512), std::string("512 B"));
    QCOMPARE(plan::formatBytes(1536), std::string("1.5 KiB"));
    QCOMPARE(plan::formatBytes(12.4 * 1024 * 1024 * 1024), std::string("12.4 GiB"));
  }

 private:
  QTemporaryDir m_dir;
  std::filesystem::path m_path;
};

QTEST_GUILESS_MAIN(PlanFitTest)
#include "test_plan_fit.moc"
