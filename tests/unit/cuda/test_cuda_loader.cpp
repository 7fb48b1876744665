// The CUDA backend is a plugin: without it, a driver or a device, createBackend("cuda") still
// returns a backend, unavailable, with a reason a person can act on.

#include <QTemporaryDir>
#include <QtTest>
#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "kernels/backend_registry.h"
#include "kernels/cuda/cuda_loader.h"
#include "kernels/cuda/cuda_memory_ledger.h"

using namespace shoal;

namespace {

// Sets an environment variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) {
      m_had = true;
      m_old = old;
    }
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (m_had) {
      setenv(m_name, m_old.c_str(), 1);
    } else {
      unsetenv(m_name);
    }
  }

 private:
  const char* m_name;
  bool m_had = false;
  std::string m_old;
};

bool hasCudaDevice() {
  const auto backend = kernels::createBackend("cuda", {});
  return backend->availability().available;
}

}  // namespace

class TestCudaLoader : public QObject {
  Q_OBJECT

 private slots:
  void registryKnowsCuda() {
    const auto names = kernels::backendNames();
    QVERIFY(std::find(names.begin(), names.end(), "cuda") != names.end());
  }

  void missingPluginPathIsUnavailableWithNotFound() {
    ScopedEnv env("SHOAL_CUDA_PLUGIN", "/nonexistent/dir/libshoal-cuda.so");
    const auto backend = kernels::createBackend("cuda", {});
    QCOMPARE(backend->name(), std::string("cuda"));
    const runtime::Availability a = backend->availability();
    QVERIFY(!a.available);
    QVERIFY2(a.reason.find("not found") != std::string::npos, a.reason.c_str());
    QVERIFY2(a.reason.find("/nonexistent/dir/libshoal-cuda.so") != std::string::npos,
             a.reason.c_str());
    QVERIFY(backend->devices().empty());
  }

  void fileThatIsNotALibraryIsRefusedWithTheLoaderError() {
    // This source file exists but is no shared object: dlopen's own error is the reason.
    ScopedEnv env("SHOAL_CUDA_PLUGIN", SHOAL_SOURCE_DIR "/tests/unit/cuda/test_cuda_loader.cpp");
    const auto backend = kernels::createBackend("cuda", {});
    const runtime::Availability a = backend->availability();
    QVERIFY(!a.available);
    QVERIFY2(a.reason.find("cannot load") != std::string::npos, a.reason.c_str());
  }

  void unavailableBackendRefusesToCreateStages() {
    ScopedEnv env("SHOAL_CUDA_PLUGIN", "/nonexistent/libshoal-cuda.so");
    const auto backend = kernels::createBackend("cuda", {});
    QVERIFY_THROWS_EXCEPTION(Error, backend->createStage("cuda0", runtime::ModelSource{}, {}));
  }

  void withoutDriverOrDeviceTheReasonSaysSo() {
    if (hasCudaDevice()) QSKIP("a CUDA device is present: this test is for machines without one");
    const auto backend = kernels::createBackend("cuda", {});
    const runtime::Availability a = backend->availability();
    QVERIFY(!a.available);
    QVERIFY(!a.reason.empty());
    // The plugin either was not built/found, could not be loaded (e.g. missing CUDA libraries),
    // or loaded and found no driver/device: each reason names its cause.
    const bool named = a.reason.find("driver") != std::string::npos ||
                       a.reason.find("device") != std::string::npos ||
                       a.reason.find("not found") != std::string::npos ||
                       a.reason.find("cannot load") != std::string::npos;
    QVERIFY2(named, a.reason.c_str());
    qInfo("cuda backend unavailable: %s", a.reason.c_str());
  }

  void pluginBuiltHereLoadsAndReportsNoDevice() {
#ifndef SHOAL_TEST_CUDA_PLUGIN
    QSKIP("this build has no CUDA plugin (SHOAL_CUDA=OFF)");
#else
    if (hasCudaDevice()) QSKIP("a CUDA device is present: tests/gpu checks the working backend");
    ScopedEnv env("SHOAL_CUDA_PLUGIN", SHOAL_TEST_CUDA_PLUGIN);
    const auto backend = kernels::createBackend("cuda", {});
    const runtime::Availability a = backend->availability();
    QVERIFY(!a.available);
    // The plugin itself loaded (its dependencies resolved) and asked the CUDA runtime.
    QVERIFY2(a.reason.find("cannot load") == std::string::npos, a.reason.c_str());
    QVERIFY2(a.reason.find("driver") != std::string::npos ||
                 a.reason.find("device") != std::string::npos,
             a.reason.c_str());
#endif
  }

  // --gpu-memory on CUDA (cuda_memory_ledger.h): a device's stages get the driver's free memory
  // capped by the limit less what this backend's stages already hold.
  void memoryLimitCapsWhatStagesMayTake() {
    cuda::MemoryLedger ledger;
    QCOMPARE(ledger.available(1000), uint64_t{1000});  // no limit: the driver's figure
    ledger.limit = 600;
    QCOMPARE(ledger.available(1000), uint64_t{600});
    QCOMPARE(ledger.available(300), uint64_t{300});  // other processes took the rest
    ledger.held += 250;                              // a first stage
    QCOMPARE(ledger.available(1000), uint64_t{350});
    ledger.held += 400;  // over the limit (built before it shrank): nothing left, no wrap
    QCOMPARE(ledger.available(1000), uint64_t{0});
    ledger.held -= 650;
    QCOMPARE(ledger.available(1000), uint64_t{600});
  }

  // The limit reaches the plugin (ABI 3 passes it at creation) without changing what a machine
  // without a device is told.
  void pluginTakesTheMemoryLimit() {
#ifndef SHOAL_TEST_CUDA_PLUGIN
    QSKIP("this build has no CUDA plugin (SHOAL_CUDA=OFF)");
#else
    if (hasCudaDevice()) QSKIP("a CUDA device is present: tests/gpu checks the working backend");
    ScopedEnv env("SHOAL_CUDA_PLUGIN", SHOAL_TEST_CUDA_PLUGIN);
    kernels::BackendOptions options;
    options.gpuMemoryLimit = uint64_t{512} << 20;
    const auto backend = kernels::createBackend("cuda", options);
    QVERIFY(!backend->availability().available);
    QVERIFY2(backend->availability().reason.find("ABI") == std::string::npos,
             backend->availability().reason.c_str());
    QCOMPARE(backend->freeDeviceBytes("cuda0"), uint64_t{0});
#endif
  }

  // The memory fit asks the plugin what a stage would take on the device: host arithmetic that
  // works without one. It counts the stage's tensors, its KV cache (a sliding window's ring
  // rather than the context) and working buffers; no device means no free bytes.
  void pluginSizesStagesWithoutADevice() {
#ifndef SHOAL_TEST_CUDA_PLUGIN
    QSKIP("this build has no CUDA plugin (SHOAL_CUDA=OFF)");
#else
    if (hasCudaDevice()) QSKIP("a CUDA device is present: tests/gpu checks the working backend");
    ScopedEnv env("SHOAL_CUDA_PLUGIN", SHOAL_TEST_CUDA_PLUGIN);
    const auto backend = kernels::createBackend("cuda", {});
    QCOMPARE(backend->freeDeviceBytes("cuda0"), uint64_t{0});
    QTemporaryDir dir;
    auto write = [&](const char* name, int window) {
      model::SyntheticModelSpec spec;
      spec.architecture = "gemma3";
      spec.nLayer = 4;
      spec.nHeadKv = 2;
      spec.nVocab = 512;
      spec.nCtx = 16384;
      spec.slidingWindow = window;
      spec.slidingWindowPattern = window > 0 ? 2 : 0;  // layers 0 and 2 windowed
      spec.tiedOutput = true;
      const std::string path = dir.filePath(name).toStdString();
      model::writeSyntheticModel(spec, path);
      return model::Model::load(path);
    };
    const auto dense = write("dense.gguf", 0), windowed = write("windowed.gguf", 64);
    auto bytes = [&](const model::Model& m, int32_t lastLayer, int32_t context) {
      const runtime::ModelSource src{&m.file(), &m.config(), &m.weights()};
      runtime::StageSpec spec;
      spec.lastLayer = lastLayer;
      spec.hasEmbedding = true;
      spec.hasHead = lastLayer == m.config().nLayer;
      spec.contextLength = context;
      spec.maxSequences = 1;
      return backend->stageDeviceBytes(src, spec);
    };
    uint64_t tensorBytes = 0;
    for (const gguf::TensorInfo& t : dense->file().tensors()) tensorBytes += t.nbytes;
    const uint64_t whole = bytes(*dense, 4, 4096);
    QVERIFY2(whole >= tensorBytes, std::to_string(whole).c_str());
    QVERIFY(bytes(*dense, 2, 4096) < whole);
    // Keys and values of 4 layers, f16, 2 heads of 64 (the writer's 256-wide, 4-head default):
    // 8192 more positions add at least that much.
    const uint64_t kvPerPosition = 4 * 2 * 2 * 64 * sizeof(uint16_t);
    const uint64_t denseGrowth = bytes(*dense, 4, 12288) - whole;
    QVERIFY2(denseGrowth >= 8192 * kvPerPosition, std::to_string(denseGrowth).c_str());
    // Two of the windowed model's layers keep a ring of a fixed size: half the KV growth.
    const uint64_t windowedGrowth = bytes(*windowed, 4, 12288) - bytes(*windowed, 4, 4096);
    QVERIFY2(windowedGrowth >= 8192 * kvPerPosition / 2 &&
                 windowedGrowth < denseGrowth - 8192 * kvPerPosition / 4,
             (std::to_string(windowedGrowth) + " vs " + std::to_string(denseGrowth)).c_str());
#endif
  }
};

QTEST_GUILESS_MAIN(TestCudaLoader)
#include "test_cuda_loader.moc"
