// planLocalSplit and buildLocalChain against a backend whose memory is scripted: a model that
// fits runs on the device whole; one that does not gets the most layers that fit (the device
// part without the head), the CPU the rest and the head; with several GPUs the layers go device
// after device, the last also taking the head when the rest fits there; one that cannot hold the
// embedding and a layer is an error naming the free memory; an asked-for layer count is taken as
// asked; a CPU backend takes every layer and refuses a layer count. chainDevices picks the GPUs.

#include <QtTest>
#include <string>
#include <vector>

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
// Devices "gpu0", "gpu1", ... with the free bytes given (and the types, discrete by default).
class ScriptedBackend final : public runtime::Backend {
 public:
  ScriptedBackend(bool gpu, uint64_t free) : m_gpu(gpu), m_free{free} {}
  ScriptedBackend(std::vector<uint64_t> free, std::vector<std::string> types = {})
      : m_gpu(true), m_free(std::move(free)), m_types(std::move(types)) {}
  std::string name() const override { return m_gpu ? "gpu" : "cpu"; }
  runtime::Availability availability() const override { return {true, {}}; }
  std::vector<runtime::DeviceInfo> devices() const override {
    std::vector<runtime::DeviceInfo> out;
    for (size_t i = 0; i < m_free.size(); ++i) {
      runtime::DeviceInfo d;
      d.id = (m_gpu ? "gpu" : "cpu") + std::to_string(i);
      d.type = !m_gpu ? "cpu" : i < m_types.size() ? m_types[i] : "discrete-gpu";
      out.push_back(d);
    }
    return out;
  }
  std::unique_ptr<runtime::Stage> createStage(const std::string& device,
                                              const runtime::ModelSource&,
                                              const runtime::StageSpec& spec) override {
    created.push_back(device);
    return std::make_unique<SpecStage>(spec);
  }
  uint64_t stageDeviceBytes(const runtime::ModelSource&,
                            const runtime::StageSpec& s) const override {
    if (!m_gpu) return 0;
    return (s.hasEmbedding ? 10 : 0) + 5 * uint64_t(s.lastLayer - s.firstLayer) +
           (s.hasHead ? 20 : 0);
  }
  uint64_t freeDeviceBytes(const std::string& device) override {
    return m_gpu ? m_free.at(std::stoul(device.substr(3))) : 0;
  }
  std::vector<std::string> created;  // the device of each stage created, in order

 private:
  bool m_gpu;
  std::vector<uint64_t> m_free;
  std::vector<std::string> m_types;
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
    const auto split = runtime::planLocalSplit(gpu, {"gpu0"}, {}, whole(), -1);
    QCOMPARE(split.deviceLayers, 12);
    QVERIFY(split.describe(12).empty());
    const auto chain = runtime::buildLocalChain(gpu, nullptr, {}, whole(), split);
    QCOMPARE(chain->stageCount(), size_t(1));
  }

  void aModelThatDoesNotFitSplitsWithTheCpu() {
    ScriptedBackend gpu(true, 52), cpu(false, 0);  // 10 + 8 * 5 = 50 fits, 9 layers do not
    const auto split = runtime::planLocalSplit(gpu, {"gpu0"}, {}, whole(), -1);
    QCOMPARE(split.deviceLayers, 8);
    QVERIFY(split.automatic);
    QCOMPARE(QString::fromStdString(split.describe(12)),
             QString("gpu0 takes layers 0-7 of 12, the CPU the rest (the model needs 1 MiB, the "
                     "device has 1 MiB free)"));
    const auto chain = runtime::buildLocalChain(gpu, &cpu, {}, whole(), split);
    QCOMPARE(chain->stageCount(), size_t(2));
    const runtime::StageSpec& a = chain->stage(0).spec();
    const runtime::StageSpec& b = chain->stage(1).spec();
    QVERIFY(a.hasEmbedding && !a.hasHead && a.firstLayer == 0 && a.lastLayer == 8);
    QVERIFY(!b.hasEmbedding && b.hasHead && b.firstLayer == 8 && b.lastLayer == 12);
  }

  void aDeviceWithoutRoomForOneLayerIsAnError() {
    ScriptedBackend gpu(true, 14);
    try {
      runtime::planLocalSplit(gpu, {"gpu0"}, {}, whole(), -1);
      QFAIL("no error");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("less than the embedding and one layer need"), e.what());
    }
  }

  void anAskedLayerCountIsTakenAsAsked() {
    ScriptedBackend gpu(true, 1000), cpu(false, 0);
    auto split = runtime::planLocalSplit(gpu, {"gpu0"}, {}, whole(), 5);
    QCOMPARE(split.deviceLayers, 5);
    QVERIFY(!split.automatic);
    QCOMPARE(QString::fromStdString(split.describe(12)),
             QString("gpu0 takes layers 0-4 of 12, the CPU the rest"));
    split = runtime::planLocalSplit(gpu, {"gpu0"}, {}, whole(), 0);
    const auto chain = runtime::buildLocalChain(gpu, &cpu, {}, whole(), split);
    QCOMPARE(chain->stageCount(), size_t(1));
    QVERIFY(chain->stage(0).spec().hasEmbedding && chain->stage(0).spec().hasHead);
    QCOMPARE(runtime::planLocalSplit(gpu, {"gpu0"}, {}, whole(), 99).deviceLayers, 12);
  }

  // Two GPUs: the first takes what fits (without the head), the second the rest and the head;
  // no CPU stage.
  void aModelLargerThanOneGpuSpreadsOverTwo() {
    ScriptedBackend gpus(
        std::vector<uint64_t>{52, 70});  // gpu0: embedding + 8 layers; gpu1: 4 layers + head = 40
    const auto split = runtime::planLocalSplit(gpus, {"gpu0", "gpu1"}, {}, whole(), -1);
    QCOMPARE(split.parts.size(), size_t(2));
    QCOMPARE(split.deviceLayers, 12);
    QVERIFY(!split.needsCpu());
    QCOMPARE(QString::fromStdString(split.describe(12)),
             QString("gpu0 takes layers 0-7 of 12, gpu1 takes layers 8-11 and the head (the model "
                     "needs 1 MiB, the devices have 1 MiB free)"));
    const auto chain = runtime::buildLocalChain(gpus, nullptr, {}, whole(), split);
    QCOMPARE(chain->stageCount(), size_t(2));
    QCOMPARE(gpus.created, (std::vector<std::string>{"gpu0", "gpu1"}));
    const runtime::StageSpec& a = chain->stage(0).spec();
    const runtime::StageSpec& b = chain->stage(1).spec();
    QVERIFY(a.hasEmbedding && !a.hasHead && a.firstLayer == 0 && a.lastLayer == 8);
    QVERIFY(!b.hasEmbedding && b.hasHead && b.firstLayer == 8 && b.lastLayer == 12);
  }

  // Two GPUs that cannot hold it all: each takes what fits, the CPU the rest and the head; a GPU
  // without room for one layer is left out.
  void whatTheGpusCannotHoldGoesToTheCpu() {
    ScriptedBackend gpus({52, 3, 17}), cpu(false, 0);  // 8 layers; none; 3 layers (+head: 35)
    const auto split = runtime::planLocalSplit(gpus, {"gpu0", "gpu1", "gpu2"}, {}, whole(), -1);
    QCOMPARE(split.parts.size(), size_t(2));
    QCOMPARE(split.parts[1].device, std::string("gpu2"));
    QCOMPARE(split.parts[1].firstLayer, 8);
    QCOMPARE(split.parts[1].lastLayer, 11);  // 8-11 would be 20: layer 11 and the head on the CPU
    QVERIFY(split.needsCpu());
    const auto chain = runtime::buildLocalChain(gpus, &cpu, {}, whole(), split);
    QCOMPARE(chain->stageCount(), size_t(3));
    const runtime::StageSpec& c = chain->stage(2).spec();
    QVERIFY(!c.hasEmbedding && c.hasHead && c.firstLayer == 11 && c.lastLayer == 12);
    QVERIFY(QString::fromStdString(split.describe(12))
                .contains("gpu2 takes layers 8-10, the CPU the rest"));
  }

  // Every layer fits, the head does not: the CPU stage holds the head alone (no layer).
  void aGpuThatTakesEveryLayerButTheHeadLeavesTheCpuTheHead() {
    ScriptedBackend gpu(true, 75), cpu(false, 0);  // 10 + 60 = 70 fits, + 20 for the head not
    const auto split = runtime::planLocalSplit(gpu, {"gpu0"}, {}, whole(), -1);
    QCOMPARE(split.deviceLayers, 12);
    QVERIFY(split.needsCpu());
    QVERIFY(QString::fromStdString(split.describe(12))
                .startsWith("gpu0 takes layers 0-11 of 12, the CPU the head"));
    const auto chain = runtime::buildLocalChain(gpu, &cpu, {}, whole(), split);
    QCOMPARE(chain->stageCount(), size_t(2));
    const runtime::StageSpec& c = chain->stage(1).spec();
    QVERIFY(!c.hasEmbedding && c.hasHead && c.firstLayer == 12 && c.lastLayer == 12);
  }

  // A model that fits the first GPU stays there; a picked device is used alone.
  void theFirstGpuAloneWhenTheModelFitsOrADeviceIsPicked() {
    ScriptedBackend gpus(std::vector<uint64_t>{90, 90});
    auto split = runtime::planLocalSplit(gpus, {"gpu0", "gpu1"}, {}, whole(), -1);
    QCOMPARE(split.parts.size(), size_t(1));
    QVERIFY(split.describe(12).empty());
    QCOMPARE(runtime::chainDevices(gpus, "gpu1"), (std::vector<std::string>{"gpu1"}));
  }

  // The GPUs a chain spreads over: the best device and the other discrete GPUs; a machine whose
  // best device is not a discrete GPU (an iGPU, lavapipe) uses it alone.
  void chainDevicesAreTheDiscreteGpus() {
    ScriptedBackend mixed({1, 1, 1, 1}, {"discrete-gpu", "integrated-gpu", "cpu", "discrete-gpu"});
    QCOMPARE(runtime::chainDevices(mixed, ""), (std::vector<std::string>{"gpu0", "gpu3"}));
    ScriptedBackend igpu({1, 1}, {"integrated-gpu", "cpu"});
    QCOMPARE(runtime::chainDevices(igpu, ""), (std::vector<std::string>{"gpu0"}));
  }

  void aCpuBackendTakesEveryLayer() {
    ScriptedBackend cpu(false, 0);
    QCOMPARE(runtime::planLocalSplit(cpu, {"cpu0"}, {}, whole(), -1).deviceLayers, 12);
    QVERIFY_THROWS_EXCEPTION(Error, runtime::planLocalSplit(cpu, {"cpu0"}, {}, whole(), 3));
  }
};

QTEST_GUILESS_MAIN(LocalChainTest)
#include "test_local_chain.moc"
