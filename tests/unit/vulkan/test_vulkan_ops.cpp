// Vulkan kernels against the CPU backend, op by op, under the GPU accuracy contract
// (docs/ARCHITECTURE.md): the kernels of the layer program (activation quantizer, integer
// mat-vec for Q4_0/Q4_1/Q8_0, RMSNorm, RoPE, SwiGLU, attention) within normalized MSE 1e-6 of the
// CPU's results in the default (native) math; the float kernels of the other weight types (F16,
// F32, Q5_0/Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4) within llama.cpp's test-backend-ops criterion
// against dequantized weights: normalized MSE <= 5e-4, 1e-6 for F32.
// Built twice: test_vulkan_ops_exact (SHOAL_TEST_EXACT_MATH) runs the opt-in exact-math variants
// (SHOAL_VULKAN_MATH=exact, shaders/math.glsl), where the layer program's kernels must give the
// CPU's results BIT FOR BIT.
// Shapes include row and token counts that do not fill the kernels' tiles. Attention with a
// sliding window stays bit for bit; with soft-capping and sinks, GeGLU and the soft-cap kernel
// (the driver's tanh/exp) are held to the NMSE criterion; the MoE router picks the CPU's
// experts in the CPU's order.
// Runs with the validation layer (SHOAL_VULKAN_VALIDATION=1) and asserts it reported no error.
// Skipped where there is no usable Vulkan device.

#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/geglu.h"
#include "kernels/cpu/reference_kernels.h"
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
double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  return nmse(got, std::vector<double>(want.begin(), want.end()));
}

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Index of the first element where two float arrays differ bitwise, or -1.
int64_t firstBitDifference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(std::min(a.size(), b.size()));
}

QString bitMismatch(const std::vector<float>& got, const std::vector<float>& want) {
  const int64_t i = firstBitDifference(got, want);
  if (i < 0) return {};
  return QString("element %1: Vulkan %2, CPU %3")
      .arg(i)
      .arg(double(got[size_t(i)]), 0, 'g', 9)
      .arg(double(want[size_t(i)]), 0, 'g', 9);
}

// The contract's per-op limits: float ops (norms, RoPE, activations, attention, and the integer
// products, whose only rounding is the float scaling) and products with quantized weights.
constexpr double kFloatOpNmse = 1e-6;
constexpr double kQuantOpNmse = 5e-4;

#ifdef SHOAL_TEST_EXACT_MATH
constexpr bool kExactMath = true;
#else
constexpr bool kExactMath = false;
#endif

// Empty when a kernel's output meets its contract against the CPU's: bit for bit in exact math,
// else normalized MSE within `limit`; otherwise what is off.
QString contractMiss(const std::vector<float>& got, const std::vector<float>& want, double limit) {
  if (kExactMath) return bitMismatch(got, want);
  if (got.size() != want.size())
    return QString("%1 values for %2").arg(got.size()).arg(want.size());
  const double e = nmse(got, want);
  return e <= limit ? QString() : QString("nMSE %1 above %2").arg(e).arg(limit);
}

}  // namespace

class VulkanOpsTest : public QObject {
  Q_OBJECT

  std::unique_ptr<vulkan::VulkanBackend> m_backend;
  std::shared_ptr<vulkan::Device> m_device;

  // Runs y = W x with the given kernel (0 auto, 1 mat-vec, 2 mat-mat, 3 block mat-vec) and
  // returns the nMSE against the dequantized reference.
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
    // The block mat-vec with 1 and 2 rows per slot too: the same results bit for bit.
    vulkan::Allocation yRows[2] = {pool.allocate(rows * tokens * 4),
                                   pool.allocate(rows * tokens * 4)};
    if (kernel == 3) {
      const vulkan::MatvecOut out[] = {{&w, yb.address}};
      rec.matvecBlocks(out, xb.address, tokens, vulkan::MatvecEpilogue::Store, 4);
      for (uint32_t i = 0; i < 2; ++i) {
        const vulkan::MatvecOut other[] = {{&w, yRows[i].address}};
        rec.matvecBlocks(other, xb.address, tokens, vulkan::MatvecEpilogue::Store, i + 1);
      }
    }
    rec.finish();
    m_device->submitAndWait(cb);
    m_device->freeCommandBuffer(cb);
    std::vector<float> y(static_cast<size_t>(rows) * tokens);
    pool.download(yb, y.data(), y.size() * 4);
    if (kernel == 3) {
      for (uint32_t i = 0; i < 2; ++i) {
        std::vector<float> other(y.size());
        pool.download(yRows[i], other.data(), other.size() * 4);
        if (const QString miss = bitMismatch(other, y); !miss.isEmpty()) {
          qWarning("%u rows per slot against 4: %s", i + 1, qPrintable(miss));
          return std::numeric_limits<double>::infinity();
        }
      }
    }
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
    setenv("SHOAL_VULKAN_MATH", kExactMath ? "exact" : "native", 1);
    m_backend = std::make_unique<vulkan::VulkanBackend>();
    const auto a = m_backend->availability();
    if (!a.available)
      QSKIP(qPrintable("no usable Vulkan device: " + QString::fromStdString(a.reason)));
    m_device = m_backend->device(m_backend->devices().front().id);
    qInfo("device: %s (subgroups %s, integer dot products %s, %s math)",
          m_device->physical().info.name.c_str(), m_device->useSubgroups() ? "on" : "off",
          m_device->useIntegerDot() ? "on" : "off", m_device->exactMath() ? "exact" : "native");
    QCOMPARE(m_device->exactMath(), kExactMath);
  }

  void matmulMatchesReferencePerTypeAndKernel_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::addColumn<int>("tokens");
    const std::pair<TensorType, const char*> types[] = {
        {TensorType::Q4_0, "q4_0"},     {TensorType::Q4_1, "q4_1"},
        {TensorType::Q5_0, "q5_0"},     {TensorType::Q5_1, "q5_1"},
        {TensorType::Q8_0, "q8_0"},     {TensorType::Q2_K, "q2_k"},
        {TensorType::Q3_K, "q3_k"},     {TensorType::Q4_K, "q4_k"},
        {TensorType::Q5_K, "q5_k"},     {TensorType::Q6_K, "q6_k"},
        {TensorType::IQ4_NL, "iq4_nl"}, {TensorType::IQ4_XS, "iq4_xs"},
        {TensorType::MXFP4, "mxfp4"},   {TensorType::F16, "f16"},
        {TensorType::F32, "f32"}};
    for (const auto& [type, name] : types) {
      const int cols = gguf::typeTraits(type).blockSize >= 256 ? 512 : 96;
      // Rows and tokens not multiples of the tiles; one decode token.
      QTest::newRow((std::string(name) + " matvec 1 token").c_str())
          << int(type) << 1 << 37 << cols << 1;
      QTest::newRow((std::string(name) + " matvec 3 tokens").c_str())
          << int(type) << 1 << 19 << cols << 3;
      QTest::newRow((std::string(name) + " matmat 13 tokens").c_str())
          << int(type) << 2 << 29 << cols << 13;
      // Two 64-row tiles and three 32-token tiles of the tiled kernel, the last of each partial.
      QTest::newRow((std::string(name) + " matmat 70 tokens").c_str())
          << int(type) << 2 << 77 << cols << 70;
      if (!kExactMath) {
        QTest::newRow((std::string(name) + " block 1 token").c_str())
            << int(type) << 3 << 37 << cols << 1;
        QTest::newRow((std::string(name) + " block 3 tokens").c_str())
            << int(type) << 3 << 19 << cols << 3;
        // 64 lanes per row (whole subgroups), several blocks per lane.
        QTest::newRow((std::string(name) + " block wide rows").c_str())
            << int(type) << 3 << 9 << 4608 << 2;
        // 16 lanes, 4 slots a group: 4, 2 and 1 rows per slot, the last group partial.
        QTest::newRow((std::string(name) + " block many rows").c_str())
            << int(type) << 3 << 1029 << 1024 << 1;
      }
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
    // The block mat-vec multiplies exactly dequantized weights with f32 activations: only the
    // summation rounds, so a layout slip (a whole sub-block off) cannot hide under the quantized
    // limit. With Q4_0, Q4_1 and Q8_0 it quantizes the activations to 8 bits as the CPU does
    // (held to the CPU's own dot products in integerMatmulMatchesCpuDot).
    const auto t = static_cast<TensorType>(type);
    const double limit = kernel == 3 && !vulkan::quantizesActivations(t) ? 1e-9
                         : t == TensorType::F32                          ? 1e-6
                                                                         : 5e-4;
    qInfo("nMSE %.3g", e);
    QVERIFY2(e <= limit, qPrintable(QString("nMSE %1").arg(e)));
  }

  // The embedding kernel decodes each type's blocks as the CPU's dequantizer does (any layout
  // slip shows up as whole sub-blocks off): rows gathered by token id, NMSE <= 1e-10 (the GPU
  // may contract d * sc * q - dmin * m into an fma).
  void embedDecodesEveryTypeAsTheCpu_data() {
    QTest::addColumn<int>("type");
    for (TensorType t : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                         TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                         TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS,
                         TensorType::MXFP4, TensorType::F16, TensorType::F32}) {
      QTest::newRow(std::string(gguf::typeTraits(t).name).c_str()) << int(t);
    }
  }
  void embedDecodesEveryTypeAsTheCpu() {
    QFETCH(int, type);
    const auto t = static_cast<TensorType>(type);
    const int64_t rows = 6, cols = 512;
    vulkan::MemoryPool pool(*m_device);
    std::vector<float> wf = randomFloats(size_t(rows * cols), 3);
    for (size_t i = 0; i < wf.size(); ++i) wf[i] *= 1.0f + float(i % 97) / 16.0f;  // scales vary
    const size_t rowBytes = gguf::rowBytes(t, cols);
    std::vector<uint8_t> wq(rowBytes * size_t(rows));
    std::vector<float> deq(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      gguf::quantizeRow(t, &wf[size_t(r * cols)], &wq[rowBytes * size_t(r)], cols);
      gguf::dequantizeRow(t, &wq[rowBytes * size_t(r)], &deq[size_t(r * cols)], cols);
    }
    vulkan::DeviceMatrix w{t, rows, cols, rowBytes, pool.allocate(wq.size())};
    pool.upload(w.memory, wq.data(), wq.size());
    const std::vector<int32_t> ids = {5, 0, 3, 3, 1};
    auto idb = upload(pool, ids);
    auto out = pool.allocate(ids.size() * size_t(cols) * 4);
    run([&](vulkan::Recorder& rec) {
      rec.embed(w, idb.address, out.address, uint32_t(ids.size()));
    });
    const auto got = download(pool, out, ids.size() * size_t(cols));
    std::vector<float> want;
    for (int32_t id : ids)
      want.insert(want.end(), deq.begin() + id * cols, deq.begin() + (id + 1) * cols);
    QVERIFY2(nmse(got, want) <= 1e-10, qPrintable(QString("nMSE %1").arg(nmse(got, want))));
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

 private:
  // Records ops with `body`, runs them and waits.
  template <typename Body>
  void run(Body body) {
    VkCommandBuffer cb = m_device->allocateCommandBuffer();
    vulkan::Recorder rec(*m_device, cb);
    body(rec);
    rec.finish();
    m_device->submitAndWait(cb);
    m_device->freeCommandBuffer(cb);
  }
  template <typename T>
  vulkan::Allocation upload(vulkan::MemoryPool& pool, const std::vector<T>& v) {
    vulkan::Allocation a = pool.allocate(v.size() * sizeof(T));
    pool.upload(a, v.data(), v.size() * sizeof(T));
    return a;
  }
  std::vector<float> download(vulkan::MemoryPool& pool, const vulkan::Allocation& a, size_t n) {
    std::vector<float> v(n);
    pool.download(a, v.data(), n * 4);
    return v;
  }

 private slots:
  // The activation quantizer: exact math gives the CPU's quants and scales bit for bit; native
  // math may round a quant on a .5 boundary the other way (its 127/amax is the driver's), so the
  // dequantized values and the scales are held to the float-op NMSE.
  void quantizerMatchesCpuQ8_1() {
    vulkan::MemoryPool pool(*m_device);
    const uint32_t cols = 160, tokens = 3;
    std::vector<float> x = randomFloats(cols * tokens, 5);
    for (int i = 32; i < 64; ++i) x[i] = 0.0f;  // an all-zero block: d = 0, quants 0
    x[70] = 1e-3f * x[70];
    const size_t n = x.size();
    auto xb = upload(pool, x), qs = pool.allocate(n), d = pool.allocate(n / 32 * 4),
         s = pool.allocate(n / 32 * 4);
    const vulkan::QuantizedActivations act{qs.address, d.address, s.address};
    run([&](vulkan::Recorder& rec) { rec.quantizeQ8(xb.address, act, cols, tokens); });
    std::vector<int8_t> gotQs(n);
    pool.download(qs, gotQs.data(), n);
    const auto gotD = download(pool, d, n / 32), gotS = download(pool, s, n / 32);
    std::vector<cpu::BlockQ8_1> want(n / 32);
    cpu::ref::quantizeQ8_1(x.data(), want.data(), static_cast<int64_t>(n));
    std::vector<float> wantD, wantS, gotValues, wantValues;
    for (size_t b = 0; b < want.size(); ++b) {
      wantD.push_back(gguf::halfToFloat(want[b].d));
      wantS.push_back(gguf::halfToFloat(want[b].s));
      if (kExactMath) {
        QVERIFY2(std::memcmp(want[b].qs, &gotQs[b * 32], 32) == 0,
                 qPrintable(QString("quants of block %1 differ").arg(b)));
      }
      for (size_t j = 0; j < 32; ++j) {
        gotValues.push_back(float(gotQs[b * 32 + j]) * gotD[b]);
        wantValues.push_back(float(want[b].qs[j]) * wantD[b]);
      }
    }
    QVERIFY2(contractMiss(gotValues, wantValues, kFloatOpNmse).isEmpty(),
             qPrintable(contractMiss(gotValues, wantValues, kFloatOpNmse)));
    QVERIFY2(contractMiss(gotD, wantD, kFloatOpNmse).isEmpty(),
             qPrintable(contractMiss(gotD, wantD, kFloatOpNmse)));
    QVERIFY2(contractMiss(gotS, wantS, kFloatOpNmse).isEmpty(),
             qPrintable(contractMiss(gotS, wantS, kFloatOpNmse)));
  }

  void integerMatmulMatchesCpuDot_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("tokens");
    for (auto [type, name] :
         {std::pair{TensorType::Q4_0, "q4_0"}, std::pair{TensorType::Q4_1, "q4_1"},
          std::pair{TensorType::Q8_0, "q8_0"}}) {
      // 1 and 3 (decode and a short batch), 13 (more than one 8-token tile of the cooperative
      // kernel, the last one partial), 21 and 70 (the tiled kernel: one partial 32-token tile,
      // two whole ones and a partial one).
      for (int tokens : {1, 3, 13, 21, 70}) {
        QTest::newRow((std::string(name) + " " + std::to_string(tokens) + " tokens").c_str())
            << int(type) << tokens;
      }
    }
  }
  void integerMatmulMatchesCpuDot() {
    QFETCH(int, type);
    QFETCH(int, tokens);
    const auto t = static_cast<TensorType>(type);
    // The default kernel's row shapes: 77 rows of 192 columns (6 blocks: 8 lanes a row, 8 rows
    // a group, the last group partial), 45 of 1536 (48 blocks: 16 lanes, 4 rows a group), and 3
    // of 4096 (128 blocks: 64 lanes, one row a group, two blocks a lane).
    // And 4099 of 1024 (32 blocks: 16 lanes, 4 slots a group; the block mat-vec puts up to 4
    // rows in a slot). The tiled kernel's 64-row tiles: partial in each shape, and 130 rows of
    // 224 columns take an odd number of blocks (7) through its two-block passes.
    for (const auto& [rows, cols] :
         {std::pair<int64_t, int64_t>{77, 192}, {45, 1536}, {3, 4096}, {4099, 1024}, {130, 224}}) {
      vulkan::MemoryPool pool(*m_device);
      const auto wf = randomFloats(size_t(rows * cols), 6);
      const size_t rowBytes = gguf::rowBytes(t, cols);
      std::vector<uint8_t> wq(rowBytes * size_t(rows));
      for (int64_t r = 0; r < rows; ++r)
        gguf::quantizeRow(t, &wf[size_t(r * cols)], &wq[rowBytes * size_t(r)], cols);
      const auto x = randomFloats(size_t(cols) * size_t(tokens), 7);
      vulkan::DeviceMatrix w{t, rows, cols, rowBytes, upload(pool, wq)};
      auto xb = upload(pool, x), qs = pool.allocate(x.size()), d = pool.allocate(x.size() / 8),
           s = pool.allocate(x.size() / 8), yb = pool.allocate(size_t(rows) * size_t(tokens) * 4);
      const vulkan::QuantizedActivations act{qs.address, d.address, s.address};
      // The decode batches also through the block mat-vec, which quantizes as it goes and must
      // give the integer kernel's results bit for bit: with packed integer dot products where the
      // device has them, and without.
      const bool block = !kExactMath && uint32_t(tokens) < vulkan::kBlockMatvecTokens;
      const bool intDot = m_device->useIntegerDot();
      auto blockY = pool.allocate(size_t(rows) * size_t(tokens) * 4);
      auto plainY = pool.allocate(size_t(rows) * size_t(tokens) * 4);
      auto plainQ8 = pool.allocate(size_t(rows) * size_t(tokens) * 4);
      // In decode order (speculative verification), every batch rounds as its rows decoded one
      // at a time: the tiled kernel's batches too.
      auto ordered = pool.allocate(size_t(rows) * size_t(tokens) * 4);
      auto alone = pool.allocate(size_t(rows) * size_t(tokens) * 4);
      run([&](vulkan::Recorder& rec) {
        rec.quantizeQ8(xb.address, act, uint32_t(cols), uint32_t(tokens));
        rec.matmulQ8(w, act, yb.address, uint32_t(tokens));
        rec.matmulQ8(w, act, ordered.address, uint32_t(tokens), true);
        const uint64_t blocks = uint64_t(cols) / 32;
        for (uint64_t tok = 0; tok < uint64_t(tokens); ++tok) {
          const vulkan::QuantizedActivations one{
              act.qs + tok * blocks * 32, act.d + tok * blocks * 4, act.s + tok * blocks * 4};
          rec.matmulQ8(w, one, alone.address + tok * uint64_t(rows) * 4, 1);
        }
        m_device->setIntegerDot(false);  // the same kernel without packed dot products
        rec.matmulQ8(w, act, plainQ8.address, uint32_t(tokens));
        m_device->setIntegerDot(intDot);
        if (block) {
          const vulkan::MatvecOut out[] = {{&w, blockY.address}};
          rec.matvecBlocks(out, xb.address, uint32_t(tokens));
          m_device->setIntegerDot(false);
          const vulkan::MatvecOut plain[] = {{&w, plainY.address}};
          rec.matvecBlocks(plain, xb.address, uint32_t(tokens));
          m_device->setIntegerDot(intDot);
        }
      });
      const auto got = download(pool, yb, size_t(rows) * size_t(tokens));
      const cpu::WeightKind kind = cpu::weightKind(t);
      std::vector<float> want(got.size());
      std::vector<uint8_t> a(gguf::rowBytes(TensorType::Q8_1, cols));
      for (int64_t tok = 0; tok < tokens; ++tok) {
        if (t == TensorType::Q4_1) {
          cpu::ref::quantizeQ8_1(&x[size_t(tok * cols)], a.data(), cols);
        } else {
          cpu::ref::quantizeQ8_0(&x[size_t(tok * cols)], a.data(), cols);
        }
        for (int64_t r = 0; r < rows; ++r) {
          want[size_t(tok * rows + r)] =
              cpu::ref::dot(kind, &wq[rowBytes * size_t(r)], a.data(), cols, cpu::DotOrder::Vec);
        }
      }
      QVERIFY2(contractMiss(got, want, kFloatOpNmse).isEmpty(),
               qPrintable(QString("%1 x %2: ").arg(rows).arg(cols) +
                          contractMiss(got, want, kFloatOpNmse)));
      QCOMPARE(bitMismatch(download(pool, plainQ8, got.size()), got), QString());
      QCOMPARE(bitMismatch(download(pool, ordered, got.size()), download(pool, alone, got.size())),
               QString());
      if (block) {
        // The same rounding as the integer kernel's, so a decoded row equals a prefill row.
        const auto gotBlock = download(pool, blockY, got.size());
        QCOMPARE(bitMismatch(gotBlock, got), QString());
        QCOMPARE(bitMismatch(download(pool, plainY, got.size()), got), QString());
      }
    }
  }

  void rmsNormMatchesCpu() {
    vulkan::MemoryPool pool(*m_device);
    const int64_t n = 576, rows = 3;
    const auto x = randomFloats(size_t(n * rows), 8), w = randomFloats(size_t(n), 9);
    auto xb = upload(pool, x), wb = upload(pool, w), yb = pool.allocate(size_t(n) * 2 * 4);
    run([&](vulkan::Recorder& rec) {
      rec.rmsNorm(xb.address, wb.address, yb.address, uint32_t(n), 2, 1, 1e-5f);
    });
    const auto got = download(pool, yb, size_t(n) * 2);
    std::vector<float> want(got.size());
    for (int64_t r = 0; r < 2; ++r)
      cpu::rmsNorm(&x[size_t((r + 1) * n)], w.data(), &want[size_t(r * n)], n, 1e-5f);
    QVERIFY2(contractMiss(got, want, kFloatOpNmse).isEmpty(),
             qPrintable(contractMiss(got, want, kFloatOpNmse)));
  }

  // A layer program's head norm (Qwen3's Q/K norm): RMSNorm in place over each head's slice of
  // the rows (tokens x heads rows of headDim), as the CPU backend normalizes every head.
  void headNormInPlaceMatchesCpu() {
    vulkan::MemoryPool pool(*m_device);
    const int64_t headDim = 128, heads = 5, tokens = 3;
    const int64_t rows = heads * tokens;
    const auto x = randomFloats(size_t(headDim * rows), 15), w = randomFloats(size_t(headDim), 16);
    auto xb = upload(pool, x), wb = upload(pool, w);
    run([&](vulkan::Recorder& rec) {
      rec.rmsNorm(xb.address, wb.address, xb.address, uint32_t(headDim), uint32_t(rows), 0, 1e-6f);
    });
    const auto got = download(pool, xb, x.size());
    std::vector<float> want = x;
    for (int64_t r = 0; r < rows; ++r) {
      float* row = &want[size_t(r * headDim)];
      cpu::rmsNorm(row, w.data(), row, headDim, 1e-6f);
    }
    QVERIFY2(contractMiss(got, want, kFloatOpNmse).isEmpty(),
             qPrintable(contractMiss(got, want, kFloatOpNmse)));
  }

  void swigluMatchesCpu() {
    vulkan::MemoryPool pool(*m_device);
    const int64_t n = 1536, rows = 2;
    auto gate = randomFloats(size_t(n * rows), 10);
    for (float& g : gate) g *= 4.0f;
    const auto up = randomFloats(size_t(n * rows), 11);
    auto gb = upload(pool, gate), ub = upload(pool, up);
    run([&](vulkan::Recorder& rec) {
      rec.swiglu(gb.address, ub.address, uint32_t(n * rows), uint32_t(n));
    });
    const auto got = download(pool, gb, size_t(n * rows));
    std::vector<float> want(got.size());
    for (int64_t r = 0; r < rows; ++r)
      cpu::ref::swiglu(&gate[size_t(r * n)], &up[size_t(r * n)], &want[size_t(r * n)], n);
    QVERIFY2(contractMiss(got, want, kFloatOpNmse).isEmpty(),
             qPrintable(contractMiss(got, want, kFloatOpNmse)));
  }

  // RoPE and attention as the layer program runs them: q/k rotated at positions
  // first..first+count-1, keys and values stored in the f16 cache, attention over the cache.
  // With the layer program's attention options: a sliding window (masking only: still bit for
  // bit in exact math), and soft-capping with sinks (tanh and the sink's exp are the driver's:
  // NMSE <= 5e-4 in either math).
  void ropeAndAttentionMatchCpu_data() {
    QTest::addColumn<int>("firstPosition");
    QTest::addColumn<int>("count");
    QTest::addColumn<int>("window");
    QTest::addColumn<float>("softcap");
    QTest::addColumn<bool>("sinks");
    QTest::newRow("decode at position 70") << 70 << 1 << 0 << 0.0f << false;  // vec_dot order
    QTest::newRow("batch of 5 at 0") << 0 << 5 << 0 << 0.0f << false;         // tinyBLAS order
    QTest::newRow("batch of 3 at 20") << 20 << 3 << 0 << 0.0f << false;
    QTest::newRow("window 16, decode at 70") << 70 << 1 << 16 << 0.0f << false;
    QTest::newRow("window 16, batch of 5 at 20") << 20 << 5 << 16 << 0.0f << false;
    QTest::newRow("softcap 0.5, sinks, batch of 3 at 20") << 20 << 3 << 0 << 0.5f << true;
    QTest::newRow("window 8, softcap, sinks, decode at 70") << 70 << 1 << 8 << 0.5f << true;
  }
  void ropeAndAttentionMatchCpu() {
    QFETCH(int, firstPosition);
    QFETCH(int, count);
    QFETCH(int, window);
    QFETCH(float, softcap);
    QFETCH(bool, sinks);
    const int32_t heads = 9, kvHeads = 3, hd = 64, ctx = 128, nRot = 64;
    const int32_t qd = heads * hd, kv = kvHeads * hd, half = nRot / 2;
    vulkan::MemoryPool pool(*m_device);
    model::RopeParams rope;
    rope.nRot = nRot;
    rope.freqBase = 10000.0f;
    rope.freqScale = 1.0f;
    rope.style = model::RopeStyle::Normal;
    std::vector<float> cosv(size_t(ctx * half)), sinv(cosv.size());
    for (int32_t p = 0; p < ctx; ++p)
      cpu::ropeAngles(p, rope, nullptr, &cosv[size_t(p * half)], &sinv[size_t(p * half)]);
    // Earlier positions already in both caches; the new tokens' q, k, v before RoPE.
    const int32_t total = firstPosition + count;
    auto q = randomFloats(size_t(count * qd), 12), k = randomFloats(size_t(total * kv), 13),
         v = randomFloats(size_t(total * kv), 14);

    // CPU: rope, f16 caches (values transposed), attention.
    std::vector<float> cq = q, ck = k;
    std::vector<uint16_t> keys(size_t(ctx * kv)), values(size_t(kv) * 128);
    cpu::AttentionShape shape{heads, kvHeads, hd, ctx, 1.0f / std::sqrt(float(hd))};
    shape.window = window;
    shape.softcap = softcap;
    std::vector<float> sinkLogits = randomFloats(size_t(heads), 15);
    if (sinks) shape.sinks = sinkLogits.data();
    for (int32_t p = 0; p < total; ++p) {
      if (p >= firstPosition) {
        const int32_t t = p - firstPosition;
        cpu::applyRope(&cq[size_t(t * qd)], heads, hd, rope, &cosv[size_t(p * half)],
                       &sinv[size_t(p * half)]);
      }
      cpu::applyRope(&ck[size_t(p * kv)], kvHeads, hd, rope, &cosv[size_t(p * half)],
                     &sinv[size_t(p * half)]);
      for (int32_t i = 0; i < kv; ++i) {
        keys[size_t(p * kv + i)] = gguf::floatToHalf(ck[size_t(p * kv + i)]);
        values[size_t(i) * size_t(shape.valueStride()) + size_t(p)] =
            gguf::floatToHalf(v[size_t(p * kv + i)]);
      }
    }
    std::vector<float> want(size_t(count * qd));
    cpu::ThreadPool threads(1);
    cpu::AttentionScratch scratch;
    scratch.reserve(shape, 1);
    cpu::attention(shape, cq.data(), count, firstPosition, keys.data(), values.data(), want.data(),
                   threads, scratch);

    // Vulkan: store the earlier positions' rotated keys (one token at a time, as decode does),
    // then the batch.
    auto cosb = upload(pool, cosv), sinb = upload(pool, sinv);
    auto kc = pool.allocate(size_t(ctx * kv) * 2), vc = pool.allocate(size_t(ctx * kv) * 2);
    pool.zero(kc);
    pool.zero(vc);
    auto params = pool.allocate(16, true);
    auto kb = upload(pool, k), vb = upload(pool, v), qb = upload(pool, q);
    auto out = pool.allocate(size_t(count * qd) * 4);
    auto sinkb = upload(pool, sinkLogits);
    const uint64_t scratchBytes =
        vulkan::attentionScratchBytes(heads, kvHeads, hd, uint32_t(count), ctx);
    auto gpuScratch = pool.allocate(std::max<uint64_t>(scratchBytes, 4));
    vulkan::AttentionOptions options;
    options.window = uint32_t(window);
    options.softcap = softcap;
    options.sinks = sinks ? sinkb.address : 0;
    for (int32_t p = 0; p < total; p += (p < firstPosition ? 1 : count)) {
      const uint32_t n = p < firstPosition ? 1u : uint32_t(count);
      static_cast<int32_t*>(params.mapped)[0] = p;
      run([&](vulkan::Recorder& rec) {
        const VkDeviceAddress kAt = kb.address + uint64_t(p) * uint64_t(kv) * 4;
        const VkDeviceAddress vAt = vb.address + uint64_t(p) * uint64_t(kv) * 4;
        rec.rope(kAt, cosb.address, sinb.address, params.address, kvHeads, hd, nRot, false, n);
        rec.kvStore(kAt, vAt, kc.address, vc.address, params.address, kv, n);
        if (p >= firstPosition) {
          rec.rope(qb.address, cosb.address, sinb.address, params.address, heads, hd, nRot, false,
                   n);
          rec.attention(qb.address, kc.address, vc.address, out.address, params.address, heads,
                        kvHeads, hd, shape.scale, n, ctx, gpuScratch.address, options);
        }
      });
    }
    const auto gotQ = download(pool, qb, size_t(count * qd));
    QVERIFY2(contractMiss(gotQ, cq, kFloatOpNmse).isEmpty(),
             qPrintable("RoPE: " + contractMiss(gotQ, cq, kFloatOpNmse)));
    const auto got = download(pool, out, size_t(count * qd));
    if (softcap > 0 || sinks) {
      QVERIFY2(nmse(got, want) <= 5e-4, qPrintable(QString("nMSE %1").arg(nmse(got, want))));
    } else {
      QVERIFY2(contractMiss(got, want, kFloatOpNmse).isEmpty(),
               qPrintable(contractMiss(got, want, kFloatOpNmse)));
    }
  }

  // Attention far into a 32k-position cache (no shared-memory bound on the context in default
  // math: the split kernel, its splits merged), against the CPU's attention: decode, batches (a
  // prefill-sized one attends in several passes, workgroups holding several tokens, the last
  // part-filled), a sliding window, soft-capping with sinks; grouped heads (4 and 6 per KV
  // head), head sizes 32 to 256. The caches are written directly (f16, position-major, as
  // kv_store lays them out), not token by token. In exact math the whole-context kernel refuses
  // such a context with an error instead.
  void longContextAttentionMatchesCpu_data() {
    QTest::addColumn<int>("firstPosition");
    QTest::addColumn<int>("count");
    QTest::addColumn<int>("window");
    QTest::addColumn<float>("softcap");
    QTest::addColumn<bool>("sinks");
    QTest::addColumn<int>("heads");
    QTest::addColumn<int>("kvHeads");
    QTest::addColumn<int>("headDim");
    QTest::newRow("decode at 32767") << 32767 << 1 << 0 << 0.0f << false << 8 << 2 << 64;
    QTest::newRow("batch of 4 at 32764") << 32764 << 4 << 0 << 0.0f << false << 8 << 2 << 64;
    QTest::newRow("decode at 1000") << 1000 << 1 << 0 << 0.0f << false << 8 << 2 << 64;
    QTest::newRow("window 4096, decode at 32767")
        << 32767 << 1 << 4096 << 0.0f << false << 8 << 2 << 64;
    QTest::newRow("softcap, sinks, batch of 2 at 20000")
        << 20000 << 2 << 0 << 30.0f << true << 8 << 2 << 64;
    QTest::newRow("2 heads over 1, head 32, batch of 509 at 0")
        << 0 << 509 << 0 << 0.0f << false << 2 << 1 << 32;
    QTest::newRow("2 heads over 1, head 32, batch of 200 at 30000")
        << 30000 << 200 << 0 << 0.0f << false << 2 << 1 << 32;
    QTest::newRow("12 heads over 2, head 128, batch of 7 at 5000")
        << 5000 << 7 << 0 << 0.0f << false << 12 << 2 << 128;
    QTest::newRow("4 heads over 4, head 256, window 300, batch of 33 at 9000")
        << 9000 << 33 << 300 << 0.0f << false << 4 << 4 << 256;
  }
  void longContextAttentionMatchesCpu() {
    QFETCH(int, firstPosition);
    QFETCH(int, count);
    QFETCH(int, window);
    QFETCH(float, softcap);
    QFETCH(bool, sinks);
    QFETCH(int, heads);
    QFETCH(int, kvHeads);
    QFETCH(int, headDim);
    const int32_t hd = headDim, ctx = 32768;
    const int32_t qd = heads * hd, kv = kvHeads * hd, total = firstPosition + count;
    vulkan::MemoryPool pool(*m_device);
    if (!vulkan::attentionFits(*m_device, hd, ctx)) {
      QVERIFY(kExactMath);  // the split kernel has no context bound
      auto none = pool.allocate(16);
      QVERIFY_THROWS_EXCEPTION(Error, run([&](vulkan::Recorder& rec) {
                                 rec.attention(none.address, none.address, none.address,
                                               none.address, none.address, heads, kvHeads, hd,
                                               0.125f, 1, ctx, 0);
                               }));
      QSKIP("exact math: the whole-context kernel refuses a 32k context (checked)");
    }
    cpu::AttentionShape shape{heads, kvHeads, hd, ctx, 1.0f / std::sqrt(float(hd))};
    shape.window = window;
    shape.softcap = softcap;
    std::vector<float> sinkLogits = randomFloats(size_t(heads), 25);
    for (float& s : sinkLogits) s += 4.0f;  // a sink that takes a visible share
    if (sinks) shape.sinks = sinkLogits.data();
    // Keys with a few strong matches far back, so that early splits matter.
    const auto q = randomFloats(size_t(count * qd), 21);
    std::vector<uint16_t> keys(size_t(ctx) * size_t(kv)), valuesT(size_t(kv) * size_t(ctx));
    std::vector<uint16_t> valuesByPosition(keys.size());
    std::mt19937 rng(22);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int32_t p = 0; p < ctx; ++p) {
      const float gain = p % 997 == 0 ? 4.0f : 1.0f;
      for (int32_t i = 0; i < kv; ++i) {
        const float kf = p < total ? dist(rng) * gain : 0.0f;
        const float vf = p < total ? dist(rng) : 0.0f;
        keys[size_t(p) * size_t(kv) + size_t(i)] = gguf::floatToHalf(kf);
        valuesByPosition[size_t(p) * size_t(kv) + size_t(i)] = gguf::floatToHalf(vf);
        valuesT[size_t(i) * size_t(shape.valueStride()) + size_t(p)] = gguf::floatToHalf(vf);
      }
    }
    std::vector<float> want(size_t(count * qd));
    cpu::ThreadPool threads(2);
    cpu::AttentionScratch cpuScratch;
    cpuScratch.reserve(shape, 2);
    cpu::attention(shape, q.data(), count, firstPosition, keys.data(), valuesT.data(), want.data(),
                   threads, cpuScratch);

    auto kc = upload(pool, keys), vc = upload(pool, valuesByPosition), qb = upload(pool, q);
    auto params = pool.allocate(16, true);
    static_cast<int32_t*>(params.mapped)[0] = firstPosition;
    auto out = pool.allocate(size_t(count * qd) * 4);
    auto sinkb = upload(pool, sinkLogits);
    auto scratch =
        pool.allocate(vulkan::attentionScratchBytes(heads, kvHeads, hd, uint32_t(count), ctx));
    vulkan::AttentionOptions options;
    options.window = uint32_t(window);
    options.softcap = softcap;
    options.sinks = sinks ? sinkb.address : 0;
    run([&](vulkan::Recorder& rec) {
      rec.attention(qb.address, kc.address, vc.address, out.address, params.address, heads, kvHeads,
                    hd, shape.scale, uint32_t(count), ctx, scratch.address, options);
    });
    const auto got = download(pool, out, size_t(count * qd));
    const double limit = softcap > 0 || sinks ? kQuantOpNmse : kFloatOpNmse;
    qInfo("nMSE %.3g", nmse(got, want));
    QVERIFY2(nmse(got, want) <= limit, qPrintable(QString("nMSE %1").arg(nmse(got, want))));
  }

  // Greedy sampling on the device picks what std::max_element picks (the host's greedy choice):
  // the first of equal maxima, past NaN, in rows of a length that is no multiple of the
  // workgroup, all -inf.
  void argmaxPicksTheFirstLargestLogit() {
    vulkan::MemoryPool pool(*m_device);
    const uint32_t vocab = 49157, rows = 4;
    std::vector<float> logits = randomFloats(size_t(vocab) * rows, 30);
    logits[5] = logits[vocab - 1] = 9.0f;  // a tie, far apart
    logits[vocab + 100] = std::nanf("");   // NaN never wins
    logits[vocab + 40000] = 7.5f;
    std::fill(logits.begin() + 2 * vocab, logits.begin() + 3 * vocab,
              -std::numeric_limits<float>::infinity());  // nothing above -inf
    logits[3 * vocab + vocab - 1] = 12.0f;               // the last entry
    auto lb = upload(pool, logits);
    auto tokens = pool.allocate(rows * 4);
    run([&](vulkan::Recorder& rec) { rec.argmax(lb.address, tokens.address, rows, vocab); });
    std::vector<int32_t> got(rows);
    pool.download(tokens, got.data(), rows * 4);
    for (uint32_t r = 0; r < rows; ++r) {
      const auto row = logits.begin() + std::ptrdiff_t(r) * vocab;
      const auto want = std::max_element(row, row + vocab, [](float a, float b) {
        return std::isnan(a) || (!std::isnan(b) && a < b);
      });
      QCOMPARE(got[r], int32_t(want - row));
    }
    QCOMPARE(got[0], 5);
    QCOMPARE(got[3], int32_t(vocab - 1));
  }

  // The block mat-vec's merged matrices and epilogues: Q, K and V of one type in one dispatch
  // (each into its own output), the residual add, and gate + up + SwiGLU, against f64 sums of the
  // dequantized weights.
  void blockMatvecMergesAndFuses() {
    if (kExactMath) QSKIP("the block mat-vec is default math only");
    vulkan::MemoryPool pool(*m_device);
    const int64_t cols = 512;
    const uint32_t tokens = 2;
    const TensorType type = TensorType::Q4_K;
    const size_t rowBytes = gguf::rowBytes(type, cols);
    struct Matrix {
      vulkan::DeviceMatrix w;
      std::vector<float> deq;
    };
    auto matrix = [&](int64_t rows, uint32_t seed) {
      const auto wf = randomFloats(size_t(rows * cols), seed);
      std::vector<uint8_t> wq(rowBytes * size_t(rows));
      std::vector<float> deq(size_t(rows * cols));
      for (int64_t r = 0; r < rows; ++r) {
        gguf::quantizeRow(type, &wf[size_t(r * cols)], &wq[rowBytes * size_t(r)], cols);
        gguf::dequantizeRow(type, &wq[rowBytes * size_t(r)], &deq[size_t(r * cols)], cols);
      }
      Matrix m{{type, rows, cols, rowBytes, pool.allocate(wq.size())}, deq};
      pool.upload(m.w.memory, wq.data(), wq.size());
      return m;
    };
    const auto x = randomFloats(size_t(cols) * tokens, 40);
    auto product = [&](const Matrix& m, uint32_t t, int64_t r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += double(m.deq[size_t(r * cols + c)]) * x[t * cols + c];
      return s;
    };
    const Matrix q = matrix(96, 41), k = matrix(32, 42), v = matrix(40, 43);
    auto xb = upload(pool, x);
    auto qy = pool.allocate(96 * tokens * 4), ky = pool.allocate(32 * tokens * 4),
         vy = pool.allocate(40 * tokens * 4);
    const auto residual = randomFloats(96 * tokens, 44);
    auto sum = upload(pool, residual), gated = pool.allocate(96 * tokens * 4),
         upOut = pool.allocate(96 * tokens * 4);
    const Matrix gate = matrix(96, 45), up = matrix(96, 46);
    run([&](vulkan::Recorder& rec) {
      const vulkan::MatvecOut qkv[] = {{&q.w, qy.address}, {&k.w, ky.address}, {&v.w, vy.address}};
      rec.matvecBlocks(qkv, xb.address, tokens);
      const vulkan::MatvecOut add[] = {{&q.w, sum.address}};
      rec.matvecBlocks(add, xb.address, tokens, vulkan::MatvecEpilogue::Add);
      const vulkan::MatvecOut ffn[] = {{&gate.w, gated.address}, {&up.w, upOut.address}};
      rec.matvecBlocks(ffn, xb.address, tokens, vulkan::MatvecEpilogue::SwiGlu);
      QCOMPARE(rec.dispatches(), 3u);
    });
    auto check = [&](const char* what, const std::vector<float>& got,
                     const std::vector<double>& want) {
      const double e = nmse(got, want);
      qInfo("%s nMSE %.3g", what, e);
      QVERIFY2(e <= 1e-9, qPrintable(QString("%1: nMSE %2").arg(what).arg(e)));
    };
    const std::pair<const Matrix*, vulkan::Allocation*> outs[] = {{&q, &qy}, {&k, &ky}, {&v, &vy}};
    for (const auto& [m, y] : outs) {
      const int64_t rows = m->w.rows;
      std::vector<double> want(size_t(rows) * tokens);
      for (uint32_t t = 0; t < tokens; ++t)
        for (int64_t r = 0; r < rows; ++r) want[t * rows + r] = product(*m, t, r);
      check("merged", download(pool, *y, want.size()), want);
    }
    std::vector<double> wantSum(96 * tokens), wantGated(96 * tokens);
    for (uint32_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < 96; ++r) {
        wantSum[t * 96 + r] = residual[t * 96 + r] + product(q, t, r);
        const double g = product(gate, t, r);
        wantGated[t * 96 + r] = g / (1 + std::exp(-g)) * product(up, t, r);
      }
    }
    check("residual add", download(pool, sum, wantSum.size()), wantSum);
    check("SwiGLU", download(pool, gated, wantGated.size()), wantGated);
  }

  // RoPE of Q and K, the query scale and the cache store in one dispatch give what rope, rope,
  // scale and kvStore give, bit for bit (the same rotation and rounding), in both RoPE styles,
  // with dimensions past nRot passing through, with and without a scale.
  void ropeStoreEqualsRopeThenStore() {
    if (kExactMath) QSKIP("the fused RoPE and store is default math only");
    for (const auto& [neox, qScale] : {std::pair{false, 1.0f}, std::pair{true, 1.0f},
                                       std::pair{false, 0.125f}, std::pair{true, 0.37f}}) {
      vulkan::MemoryPool pool(*m_device);
      const uint32_t qHeads = 6, kvHeads = 2, headDim = 64, nRot = 48, count = 3, ctx = 16;
      const uint32_t kvDim = kvHeads * headDim;
      const auto q = randomFloats(size_t(count) * qHeads * headDim, 50);
      const auto k = randomFloats(size_t(count) * kvDim, 51);
      const auto v = randomFloats(size_t(count) * kvDim, 52);
      const auto cosv = randomFloats(size_t(ctx) * nRot / 2, 53);
      const auto sinv = randomFloats(size_t(ctx) * nRot / 2, 54);
      auto cb = upload(pool, cosv), sb = upload(pool, sinv);
      auto params = upload(pool, std::vector<int32_t>{5});
      auto q1 = upload(pool, q), k1 = upload(pool, k), v1 = upload(pool, v);
      auto q2 = upload(pool, q), k2 = upload(pool, k), v2 = upload(pool, v);
      const std::vector<float> zeros(size_t(ctx) * kvDim / 2, 0.0f);  // f16 caches
      auto keys1 = upload(pool, zeros), values1 = upload(pool, zeros);
      auto keys2 = upload(pool, zeros), values2 = upload(pool, zeros);
      run([&](vulkan::Recorder& rec) {
        rec.rope(q1.address, cb.address, sb.address, params.address, qHeads, headDim, nRot, neox,
                 count);
        rec.rope(k1.address, cb.address, sb.address, params.address, kvHeads, headDim, nRot, neox,
                 count);
        rec.kvStore(k1.address, v1.address, keys1.address, values1.address, params.address, kvDim,
                    count);
        if (qScale != 1.0f) rec.scale(q1.address, uint32_t(q.size()), qScale);
        rec.ropeStore(q2.address, k2.address, v2.address, keys2.address, values2.address,
                      cb.address, sb.address, params.address, qHeads, kvHeads, headDim, nRot, neox,
                      count, qScale);
      });
      QCOMPARE(bitMismatch(download(pool, q2, q.size()), download(pool, q1, q.size())), QString());
      QCOMPARE(
          bitMismatch(download(pool, keys2, zeros.size()), download(pool, keys1, zeros.size())),
          QString());
      QCOMPARE(
          bitMismatch(download(pool, values2, zeros.size()), download(pool, values1, zeros.size())),
          QString());
    }
  }

  // Top-k on the device picks the CPU sampler's candidates in its order (higher logit first, lower
  // id on ties, NaN as -inf, +inf as the largest float): one level (a vocabulary under 1024),
  // two and three levels (a 300k vocabulary), with ties, NaN and -inf rows.
  void topKPicksTheSamplersCandidates_data() {
    QTest::addColumn<int>("vocab");
    QTest::addColumn<int>("k");
    QTest::newRow("1000 k 40") << 1000 << 40;
    QTest::newRow("49157 k 40") << 49157 << 40;
    QTest::newRow("49157 k 1") << 49157 << 1;
    QTest::newRow("300000 k 64") << 300000 << 64;
    QTest::newRow("50 k 64 (fewer entries than k)") << 50 << 64;
  }
  void topKPicksTheSamplersCandidates() {
    QFETCH(int, vocab);
    QFETCH(int, k);
    vulkan::MemoryPool pool(*m_device);
    const uint32_t rows = 3, n = uint32_t(vocab);
    std::vector<float> logits = randomFloats(size_t(n) * rows, 60);
    for (float& v : logits) v = std::round(v * 8.0f) / 8.0f;  // many ties, -0 and +0 among them
    logits[7] = std::nanf("");
    logits[n + 3] = std::numeric_limits<float>::infinity();
    std::fill(logits.begin() + 2 * n, logits.end(), -std::numeric_limits<float>::infinity());
    logits[2 * n + n / 2] = 1.0f;
    auto lb = upload(pool, logits);
    const uint64_t scratchBytes = std::max<uint64_t>(vulkan::topKScratchBytes(rows, n, k), 4);
    vulkan::Allocation scratch[4];
    for (auto& a : scratch) a = pool.allocate(scratchBytes);
    const vulkan::Recorder::TopKScratch ts{{scratch[0].address, scratch[1].address},
                                           {scratch[2].address, scratch[3].address}};
    auto values = pool.allocate(size_t(rows) * k * 4), ids = pool.allocate(size_t(rows) * k * 4);
    run([&](vulkan::Recorder& rec) {
      rec.topK(lb.address, rows, n, uint32_t(k), ts, values.address, ids.address);
    });
    const auto gotValues = download(pool, values, size_t(rows) * k);
    std::vector<int32_t> gotIds(size_t(rows) * k);
    pool.download(ids, gotIds.data(), gotIds.size() * 4);
    for (uint32_t r = 0; r < rows; ++r) {
      std::vector<std::pair<float, int32_t>> want;
      for (uint32_t i = 0; i < n; ++i) {
        float v = logits[size_t(r) * n + i];
        if (std::isnan(v)) v = -std::numeric_limits<float>::infinity();
        if (v == std::numeric_limits<float>::infinity()) v = std::numeric_limits<float>::max();
        want.push_back({v, int32_t(i)});
      }
      const size_t keep = std::min<size_t>(size_t(k), want.size());
      std::partial_sort(want.begin(), want.begin() + std::ptrdiff_t(keep), want.end(),
                        [](const auto& a, const auto& b) {
                          return a.first > b.first || (a.first == b.first && a.second < b.second);
                        });
      for (size_t j = 0; j < size_t(k); ++j) {
        const size_t at = size_t(r) * k + j;
        if (j >= keep) {
          QCOMPARE(gotIds[at], -1);
          continue;
        }
        QCOMPARE(gotIds[at], want[j].second);
        QCOMPARE(gotValues[at], want[j].first);
      }
    }
  }

  // GeGLU against the CPU's f16 GELU table (the driver's tanh: within a step of f16), and the
  // Scale and soft-cap kernels (a product: bit for bit; tanh: NMSE).
  void gegluScaleAndSoftcapMatchCpu() {
    vulkan::MemoryPool pool(*m_device);
    const int64_t n = 2048;
    auto gate = randomFloats(size_t(n), 16);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] *= i % 7 == 0 ? 30.0f : 3.0f;  // past +-10
    const auto up = randomFloats(size_t(n), 17);
    auto gb = upload(pool, gate), ub = upload(pool, up);
    auto scaled = upload(pool, up), capped = upload(pool, gate);
    run([&](vulkan::Recorder& rec) {
      rec.geglu(gb.address, ub.address, uint32_t(n));
      rec.scale(scaled.address, uint32_t(n), 16.0f / 3.0f);
      rec.softcap(capped.address, uint32_t(n), 2.5f);
    });
    std::vector<float> want(static_cast<size_t>(n));
    cpu::geglu(gate.data(), up.data(), want.data(), n);
    const auto got = download(pool, gb, size_t(n));
    QVERIFY2(nmse(got, want) <= 5e-4, qPrintable(QString("GeGLU nMSE %1").arg(nmse(got, want))));
    int same = 0;
    for (int64_t i = 0; i < n; ++i) same += got[size_t(i)] == want[size_t(i)];
    qInfo("GeGLU: %d of %lld values bit-identical to the CPU's", same, static_cast<long long>(n));

    std::vector<float> wantScaled(up), wantCapped(gate);
    for (float& x : wantScaled) x *= 16.0f / 3.0f;
    for (float& x : wantCapped) x = std::tanh(x * (1.0f / 2.5f)) * 2.5f;
    const auto gotScaled = download(pool, scaled, size_t(n));
    QVERIFY2(firstBitDifference(gotScaled, wantScaled) < 0,
             qPrintable(bitMismatch(gotScaled, wantScaled)));
    const auto gotCapped = download(pool, capped, size_t(n));
    QVERIFY2(nmse(gotCapped, wantCapped) <= 5e-4,
             qPrintable(QString("soft-cap nMSE %1").arg(nmse(gotCapped, wantCapped))));
  }

  // A mixture of experts' products (matvecExperts): each (token, k) entry multiplies its expert's
  // matrix with its token's row (gate, up) or its own row (down). Float-path types against f64
  // sums of the dequantized weights; Q8_0 and Q4_0 against the CPU's integer dot products of
  // 8-bit activations (what the CPU's mul_mat_id computes).
  void expertProductsMatchTheCpu_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<bool>("xPerEntry");
    for (auto [type, name] :
         {std::pair{TensorType::Q8_0, "q8_0"}, std::pair{TensorType::Q4_0, "q4_0"},
          std::pair{TensorType::Q4_K, "q4_k"}, std::pair{TensorType::F16, "f16"}}) {
      QTest::newRow((std::string(name) + " token rows").c_str()) << int(type) << false;
      QTest::newRow((std::string(name) + " entry rows").c_str()) << int(type) << true;
    }
  }
  void expertProductsMatchTheCpu() {
    QFETCH(int, type);
    QFETCH(bool, xPerEntry);
    const auto t = static_cast<TensorType>(type);
    vulkan::MemoryPool pool(*m_device);
    const int64_t experts = 4, rowsPerExpert = 40, cols = 512;
    const uint32_t tokens = 3, used = 2, entries = tokens * used;
    const size_t rowBytes = gguf::rowBytes(t, cols);
    const int64_t rows = experts * rowsPerExpert;
    const auto wf = randomFloats(size_t(rows * cols), 70);
    std::vector<uint8_t> wq(rowBytes * size_t(rows));
    std::vector<float> deq(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      gguf::quantizeRow(t, &wf[size_t(r * cols)], &wq[rowBytes * size_t(r)], cols);
      gguf::dequantizeRow(t, &wq[rowBytes * size_t(r)], &deq[size_t(r * cols)], cols);
    }
    const std::vector<int32_t> ids = {3, 1, 0, 3, 2, 1};
    const auto x = randomFloats(size_t(cols) * (xPerEntry ? entries : tokens), 71);
    vulkan::DeviceMatrix w{t, rows, cols, rowBytes, upload(pool, wq)};
    auto xb = upload(pool, x), ib = upload(pool, ids);
    auto yb = pool.allocate(size_t(entries) * rowsPerExpert * 4);
    run([&](vulkan::Recorder& rec) {
      rec.matvecExperts(w, rowsPerExpert, ib.address, xb.address, yb.address, entries, used,
                        xPerEntry);
    });
    const auto got = download(pool, yb, size_t(entries) * rowsPerExpert);
    std::vector<float> want(got.size());
    const bool integer = vulkan::quantizesActivations(t) && !kExactMath;
    std::vector<uint8_t> a(gguf::rowBytes(TensorType::Q8_1, cols));
    for (uint32_t e = 0; e < entries; ++e) {
      const float* xr = &x[size_t(xPerEntry ? e : e / used) * cols];
      if (integer) cpu::ref::quantizeQ8_0(xr, a.data(), cols);
      for (int64_t r = 0; r < rowsPerExpert; ++r) {
        const int64_t wr = ids[e] * rowsPerExpert + r;
        double sum = 0;
        if (integer) {
          sum = cpu::ref::dot(cpu::weightKind(t), &wq[rowBytes * size_t(wr)], a.data(), cols,
                              cpu::DotOrder::Vec);
        } else {
          for (int64_t c = 0; c < cols; ++c) sum += double(deq[size_t(wr * cols + c)]) * xr[c];
        }
        want[size_t(e * rowsPerExpert + r)] = float(sum);
      }
    }
    const double e = nmse(got, want);
    qInfo("nMSE %.3g", e);
    QVERIFY2(e <= (integer ? kFloatOpNmse : 1e-9), qPrintable(QString("nMSE %1").arg(e)));
  }

  // The router's choice (moe_route) against the CPU backend's rule (cpu_layer_moe.cpp): for
  // each row the same experts in the same order, and weights within rounding, for both gatings
  // (Softmax with normalized weights: qwen3moe; SoftmaxWeight: gpt-oss), 128 experts top 8.
  void moeRouteChoosesAsTheCpu_data() {
    QTest::addColumn<bool>("softmaxOfChosen");
    QTest::newRow("softmax, normalized (qwen3moe)") << false;
    QTest::newRow("softmax of the chosen (gpt-oss)") << true;
  }
  void moeRouteChoosesAsTheCpu() {
    QFETCH(bool, softmaxOfChosen);
    const uint32_t rows = 5, experts = 128, used = 8;
    vulkan::MemoryPool pool(*m_device);
    const auto logits = randomFloats(size_t(rows * experts), 18);
    auto lb = upload(pool, logits);
    auto ids = pool.allocate(rows * used * 4), weights = pool.allocate(rows * used * 4);
    run([&](vulkan::Recorder& rec) {
      rec.moeRoute(lb.address, ids.address, weights.address, rows, experts, used, softmaxOfChosen,
                   !softmaxOfChosen);
    });
    std::vector<int32_t> gotIds(rows * used);
    pool.download(ids, gotIds.data(), gotIds.size() * 4);
    const auto gotWeights = download(pool, weights, size_t(rows * used));
    std::vector<float> wantWeights;
    for (uint32_t t = 0; t < rows; ++t) {
      std::vector<double> p(logits.begin() + t * experts, logits.begin() + (t + 1) * experts);
      auto softmax = [](std::vector<double>& v) {
        const double m = *std::max_element(v.begin(), v.end());
        double sum = 0;
        for (double& x : v) sum += (x = std::exp(x - m));
        for (double& x : v) x /= sum;
      };
      if (!softmaxOfChosen) softmax(p);
      std::vector<int32_t> order(experts);
      for (uint32_t e = 0; e < experts; ++e) order[e] = int32_t(e);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return p[a] > p[b]; });
      std::vector<double> w;
      for (uint32_t k = 0; k < used; ++k) {
        QCOMPARE(gotIds[t * used + k], order[k]);
        w.push_back(p[size_t(order[k])]);
      }
      if (softmaxOfChosen) softmax(w);
      double total = 0;
      for (double x : w) total += x;
      for (double x : w) wantWeights.push_back(float(softmaxOfChosen ? x : x / total));
    }
    QVERIFY2(nmse(gotWeights, wantWeights) <= (kExactMath ? 1e-10 : kFloatOpNmse),
             qPrintable(QString("weights nMSE %1").arg(nmse(gotWeights, wantWeights))));
  }

  void validationLayerReportedNoErrors() { QCOMPARE(vulkan::validationErrorCount(), 0); }
};

QTEST_GUILESS_MAIN(VulkanOpsTest)
#include "test_vulkan_ops.moc"
