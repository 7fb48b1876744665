// The CUDA backend is a plugin: without it, a driver or a device, createBackend("cuda") still
// returns a backend, unavailable, with a reason a person can act on.

#include <QtTest>
#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "kernels/backend_registry.h"
#include "kernels/cuda/cuda_loader.h"

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
};

QTEST_GUILESS_MAIN(TestCudaLoader)
#include "test_cuda_loader.moc"
