// planLocalSplit and buildLocalChain against a backend whose memory is scripted: a model that
// fits runs on the device whole; one that does not gets the most layers that fit (the device
// part without the head), the CPU the rest and the head; one that cannot hold the embedding and
// a layer is an error naming the free memory; an asked-for layer count is taken as asked; a CPU
// backend takes every layer and refuses a layer count.

#include <QtTest>

#include "engine/error.h"
#include "engine/runtime/local_chain.h"
#include "engine/runtime/stage_sequences.h"

using namespace shoal;

namespace {

// A stage that only says what it holds.
class SpecStage final : public runtime::LocalStage {
 public:
  explicit SpecStage(const runtime::StageSpec& spec) : m_spec(spec) {}
  const runtime::StageSpec& spec() const override { return m_spec; }
  int32_t truncate(int32_t, int32_t from) override { return from; }
  int32_t cachedPositions(int32_t) const override { return 0; }

 protected:
  void run(const runtime::Batch&, runtime::StageOutput&) override {}

 private:
  runtime::StageSpec m_spec;
};

// Device bytes: 10 for the embedding, 5 per layer, 20 for the head; `gpu` false: a CPU backend.
class ScriptedBackend final : public runtime::Backend {
 public:
  ScriptedBackend(bool gpu, uint64_t free) : m_gpu(gpu), m_free(free) {}
  std::string name() const override { return m_gpu ? "gpu" : "cpu"; }
  runtime::Availability availability() const override { return {true, {}}; }
  std::vector<runtime::DeviceInfo> devices() const override {
    runtime::DeviceInfo d;
    d.id = m_gpu ? "gpu0" : "cpu0";
    return {d};
  }
  std::unique_ptr<runtime::Stage> createStage(const std::string&, const runtime::ModelSource&,
                                              const runtime::StageSpec& spec) override {
    return std::make_unique<SpecStage>(spec);
  }
  uint64_t stageDeviceBytes(const runtime::ModelSource&,
                            const runtime::StageSpec& s) const override {
    if (!m_gpu) return 0;
    return (s.hasEmbedding ? 10 : 0) + 5 * uint64_t(s.lastLayer - s.firstLayer) +
           (s.hasHead ? 20 : 0);
  }
  uint64_t freeDeviceBytes(const std::string&) override { return m_gpu ? m_free : 0; }

 private:
  bool m_gpu;
  uint64_t m_free;
};

runtime::StageSpec whole() {
  runtime::StageSpec s;
  s.firstLayer = 0;
  s.lastLayer = 12;
  s.hasEmbedding = s.hasHead = true;
  s.contextLength = 64;
  return s;
}

}  // namespace

class LocalChainTest : public QObject {
  Q_OBJECT

 private slots:
  void aModelThatFitsRunsWholeOnTheDevice() {
    ScriptedBackend gpu(true, 90);  // 10 + 60 + 20
    const auto split = runtime::planLocalSplit(gpu, "gpu0", {}, whole(), -1);
    QCOMPARE(split.deviceLayers, 12);
    QVERIFY(split.describe("gpu0", 12).empty());
    const auto chain = runtime::buildLocalChain(gpu, "gpu0", nullptr, {}, whole(), split);
    QCOMPARE(chain->stageCount(), size_t(1));
  }

  void aModelThatDoesNotFitSplitsWithTheCpu() {
    ScriptedBackend gpu(true, 52), cpu(false, 0);  // 10 + 8 * 5 = 50 fits, 9 layers do not
    const auto split = runtime::planLocalSplit(gpu, "gpu0", {}, whole(), -1);
    QCOMPARE(split.deviceLayers, 8);
    QVERIFY(split.automatic);
    QCOMPARE(QString::fromStdString(split.describe("gpu0", 12)),
             QString("gpu0 takes layers 0-7 of 12, the CPU the rest (the model needs 1 MiB, the "
                     "device has 1 MiB free)"));
    const auto chain = runtime::buildLocalChain(gpu, "gpu0", &cpu, {}, whole(), split);
    QCOMPARE(chain->stageCount(), size_t(2));
    const runtime::StageSpec& a = chain->stage(0).spec();
    const runtime::StageSpec& b = chain->stage(1).spec();
    QVERIFY(a.hasEmbedding && !a.hasHead && a.firstLayer == 0 && a.lastLayer == 8);
    QVERIFY(!b.hasEmbedding && b.hasHead && b.firstLayer == 8 && b.lastLayer == 12);
  }

  void aDeviceWithoutRoomForOneLayerIsAnError() {
    ScriptedBackend gpu(true, 14);
    try {
      runtime::planLocalSplit(gpu, "gpu0", {}, whole(), -1);
      QFAIL("no error");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("less than the embedding and one layer need"), e.what());
    }
  }

  void anAskedLayerCountIsTakenAsAsked() {
    ScriptedBackend gpu(true, 1000), cpu(false, 0);
    auto split = runtime::planLocalSplit(gpu, "gpu0", {}, whole(), 5);
    QCOMPARE(split.deviceLayers, 5);
    QVERIFY(!split.automatic);
    QCOMPARE(QString::fromStdString(split.describe("gpu0", 12)),
             QString("gpu0 takes layers 0-4 of 12, the CPU the rest"));
    split = runtime::planLocalSplit(gpu, "gpu0", {}, whole(), 0);
    const auto chain = runtime::buildLocalChain(gpu, "gpu0", &cpu, {}, whole(), split);
    QCOMPARE(chain->stageCount(), size_t(1));
    QVERIFY(chain->stage(0).spec().hasEmbedding && chain->stage(0).spec().hasHead);
    QCOMPARE(runtime::planLocalSplit(gpu, "gpu0", {}, whole(), 99).deviceLayers, 12);
  }

  void aCpuBackendTakesEveryLayer() {
    ScriptedBackend cpu(false, 0);
    QCOMPARE(runtime::planLocalSplit(cpu, "cpu0", {}, whole(), -1).deviceLayers, 12);
    QVERIFY_THROWS_EXCEPTION(Error, runtime::planLocalSplit(cpu, "cpu0", {}, whole(), 3));
  }
};

QTEST_GUILESS_MAIN(LocalChainTest)
#include "test_local_chain.moc"
