// Vulkan kernels against the CPU reference (gguf::dequantizeRow + float math), op by op, with
// llama.cpp's test-backend-ops criterion: normalized MSE <= 5e-4 for quantized weights, 1e-6 for
// exact f32 paths. Shapes include row and token counts that do not fill the kernels' tiles.
// Runs with the validation layer (SHOAL_VULKAN_VALIDATION=1) and asserts it reported no error.
// Skipped where there is no usable Vulkan device.

#include <QtTest>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "engine/gguf/dequantize.h"
#include "kernels/vulkan/vk_ops.h"
#include "kernels/vulkan/vulkan_backend.h"

using namespace shoal;
using gguf::TensorType;

namespace {

double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  return err / std::max(ref, 1e-30);
}

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

}  // namespace

class VulkanOpsTest : public QObject {
  Q_OBJECT

  std::unique_ptr<vulkan::VulkanBackend> m_backend;
  std::shared_ptr<vulkan::Device> m_device;

  // Runs y = W x with the given kernel (0 auto, 1 mat-vec, 2 mat-mat) and returns the nMSE
  // against the dequantized reference.
  double matmulError(TensorType type, int64_t rows, int64_t cols, uint32_t tokens, int kernel) {
    vulkan::MemoryPool pool(*m_device);
    const std::vector<float> wf = randomFloats(static_cast<size_t>(rows * cols), 1);
    const size_t rowBytes = gguf::rowBytes(type, cols);
    std::vector<uint8_t> wq(rowBytes * static_cast<size_t>(rows));
    std::vector<float> deq(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      gguf::quantizeRow(type, &wf[static_cast<size_t>(r * cols)], &wq[rowBytes * r], cols);
      gguf::dequantizeRow(type, &wq[rowBytes * r], &deq[static_cast<size_t>(r * cols)], cols);
    }
    const std::vector<float> x = randomFloats(static_cast<size_t>(cols) * tokens, 2);
    vulkan::DeviceMatrix w{type, rows, cols, rowBytes, pool.allocate(wq.size())};
    pool.upload(w.memory, wq.data(), wq.size());
    vulkan::Allocation xb = pool.allocate(x.size() * 4), yb = pool.allocate(rows * tokens * 4);
    pool.upload(xb, x.data(), x.size() * 4);
    VkCommandBuffer cb = m_device->allocateCommandBuffer();
    vulkan::Recorder rec(*m_device, cb);
    if (kernel == 1) rec.matvec(w, xb.address, yb.address, tokens);
    if (kernel == 2) rec.matmat(w, xb.address, yb.address, tokens);
    if (kernel == 0) rec.matmul(w, xb.address, yb.address, tokens);
    rec.finish();
    m_device->submitAndWait(cb);
    m_device->freeCommandBuffer(cb);
    std::vector<float> y(static_cast<size_t>(rows) * tokens);
    pool.download(yb, y.data(), y.size() * 4);
    std::vector<double> want(y.size());
    for (uint32_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) s += double(deq[r * cols + c]) * x[t * cols + c];
        want[t * rows + r] = s;
      }
    return nmse(y, want);
  }

 private slots:
  void initTestCase() {
    setenv("SHOAL_VULKAN_VALIDATION", "1", 1);
    m_backend = std::make_unique<vulkan::VulkanBackend>();
    const auto a = m_backend->availability();
    if (!a.available)
      QSKIP(qPrintable("no usable Vulkan device: " + QString::fromStdString(a.reason)));
    m_device = m_backend->device(m_backend->devices().front().id);
    qInfo("device: %s (subgroups %s)", m_device->physical().info.name.c_str(),
          m_device->useSubgroups() ? "on" : "off");
  }

  void matmulMatchesReferencePerTypeAndKernel_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::addColumn<int>("tokens");
    const std::pair<TensorType, const char*> types[] = {
        {TensorType::Q4_0, "q4_0"}, {TensorType::Q4_1, "q4_1"}, {TensorType::Q8_0, "q8_0"},
        {TensorType::Q4_K, "q4_k"}, {TensorType::Q6_K, "q6_k"}, {TensorType::F16, "f16"},
        {TensorType::F32, "f32"}};
    for (const auto& [type, name] : types) {
      const int cols = gguf::typeTraits(type).blockSize >= 256 ? 512 : 96;
      // Rows and tokens not multiples of the 8x8 tile; one decode token.
      QTest::newRow((std::string(name) + " matvec 1 token").c_str())
          << int(type) << 1 << 37 << cols << 1;
      QTest::newRow((std::string(name) + " matvec 3 tokens").c_str())
          << int(type) << 1 << 19 << cols << 3;
      QTest::newRow((std::string(name) + " matmat 13 tokens").c_str())
          << int(type) << 2 << 29 << cols << 13;
    }
  }
  void matmulMatchesReferencePerTypeAndKernel() {
    QFETCH(int, type);
    QFETCH(int, kernel);
    QFETCH(int, rows);
    QFETCH(int, cols);
    QFETCH(int, tokens);
    const double e = matmulError(static_cast<TensorType>(type), rows, cols,
                                 static_cast<uint32_t>(tokens), kernel);
    const double limit = static_cast<TensorType>(type) == TensorType::F32 ? 1e-6 : 5e-4;
    QVERIFY2(e <= limit, qPrintable(QString("nMSE %1").arg(e)));
  }

  void rmsNormMatchesReference() {
    vulkan::MemoryPool pool(*m_device);
    const int64_t n = 100, rows = 3;
    const auto x = randomFloats(n * rows, 3), w = randomFloats(n, 4);
    auto xb = pool.allocate(x.size() * 4), wb = pool.allocate(w.size() * 4),
         yb = pool.allocate(n * 2 * 4);
    pool.upload(xb, x.data(), x.size() * 4);
    pool.upload(wb, w.data(), w.size() * 4);
    VkCommandBuffer cb = m_device->allocateCommandBuffer();
    vulkan::Recorder rec(*m_device, cb);
    rec.rmsNorm(xb.address, wb.address, yb.address, n, 2, 1, 1e-5f);  // rows 1 and 2
    rec.finish();
    m_device->submitAndWait(cb);
    m_device->freeCommandBuffer(cb);
    std::vector<float> y(n * 2);
    pool.download(yb, y.data(), y.size() * 4);
    std::vector<double> want(y.size());
    for (int64_t r = 0; r < 2; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += double(x[(r + 1) * n + i]) * x[(r + 1) * n + i];
      const double s = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int64_t i = 0; i < n; ++i) want[r * n + i] = x[(r + 1) * n + i] * s * w[i];
    }
    QVERIFY2(nmse(y, want) <= 1e-6, qPrintable(QString("nMSE %1").arg(nmse(y, want))));
  }

  void validationLayerReportedNoErrors() { QCOMPARE(vulkan::validationErrorCount(), 0); }
};

QTEST_GUILESS_MAIN(VulkanOpsTest)
#include "test_vulkan_ops.moc"
