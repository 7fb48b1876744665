// matmul(): the thread-pool driver gives the reference kernels' results bit for bit with 1 and
// 2 threads, and picks llama.cpp's dot order (float types, K-quants, Q4_0's repacked kernels).

#include <QtTest>
#include <vector>

#include "cpu_test_util.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/gguf_file.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/reference_kernels.h"
#include "kernels/cpu/row_groups.h"

using namespace shoal;
using namespace shoal::cpu;
using gguf::TensorType;

namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

Matrix makeMatrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m;
  const auto f = test::randomValues(static_cast<size_t>(rows * cols), seed, 0.05f);
  const size_t rowBytes = gguf::rowBytes(type, cols);
  m.bytes.assign(rowBytes * static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    gguf::quantizeRow(type, &f[static_cast<size_t>(r * cols)], &m.bytes[rowBytes * r], cols);
  }
  gguf::TensorInfo info;
  info.name = "test";
  info.type = type;
  info.dims = {cols, rows};
  info.data = m.bytes.data();
  m.w = WeightMatrix::from(info);
  return m;
}

// The reference: convert each token, one dot per (row, token). orderTokens as matmul()'s. A
// Q4_K product in the repacked order gives the whole fours of its 2+ tokens llama.cpp's gemm
// order and the rest its gemv order (kernel_table.h); in the one-token order, all the gemv's.
std::vector<float> referenceProduct(const WeightMatrix& w, const std::vector<float>& x,
                                    int64_t tokens, int64_t orderTokens = 0) {
  std::vector<uint8_t> act(w.activationBytes());
  std::vector<float> y(static_cast<size_t>(w.rows * tokens));
  const int64_t orderOf = orderTokens > 0 ? orderTokens : tokens;
  const DotOrder order = dotOrder(w, orderOf);
  const bool split = (w.kind == WeightKind::Q4_K || w.kind == WeightKind::Q2_K) &&
                     order == DotOrder::Repacked && orderOf >= 2;
  for (int64_t t = 0; t < tokens; ++t) {
    referenceKernels().convert[static_cast<int>(w.activation)](&x[static_cast<size_t>(t * w.cols)],
                                                               act.data(), w.cols);
    const DotOrder tokenOrder = split && t < tokens - tokens % 4 ? DotOrder::RepackedGemm : order;
    for (int64_t r = 0; r < w.rows; ++r) {
      y[static_cast<size_t>(t * w.rows + r)] =
          ref::dot(w.kind, w.row(r), act.data(), w.cols, tokenOrder);
    }
  }
  return y;
}

}  // namespace

class CpuMatmulTest : public QObject {
  Q_OBJECT

 private slots:
  void matmulMatchesReferenceWithOneAndTwoThreads_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::addColumn<int>("tokens");
    for (TensorType t : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                         TensorType::Q8_0, TensorType::F16, TensorType::BF16, TensorType::F32}) {
      // 40 rows: Q4_0's repacked order (a tensor of 8k rows).
      for (int rows : {1, 6, 37, 40}) {
        for (int tokens : {1, 3, 9}) {
          QTest::addRow("%s/r%d/t%d", gguf::typeName(t).c_str(), rows, tokens)
              << static_cast<int>(t) << rows << 96 << tokens;
        }
      }
    }
    for (TensorType t : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
      for (int tokens : {5, 9}) {
        QTest::addRow("%s/r13/t%d", gguf::typeName(t).c_str(), tokens)
            << static_cast<int>(t) << 13 << 512 << tokens;
      }
    }
  }
  void matmulMatchesReferenceWithOneAndTwoThreads() {
    QFETCH(int, type);
    QFETCH(int, rows);
    QFETCH(int, cols);
    QFETCH(int, tokens);
    const Matrix m = makeMatrix(static_cast<TensorType>(type), rows, cols, 3);
    const auto x = test::randomValues(static_cast<size_t>(cols * tokens), 4);
    const auto ref = referenceProduct(m.w, x, tokens);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      MatmulScratch scratch;
      std::vector<float> y(ref.size(), NAN);
      matmul(m.w, x.data(), tokens, y.data(), pool, scratch);
      QVERIFY2(test::firstBitDifference(y.data(), ref.data(), ref.size()) < 0,
               qPrintable(QString("%1 threads").arg(threads)));
    }
  }

  // While the weight copy is under way on a matrix, rows [0, copiedRows) come from the copy and
  // the rest from the file mapping (matmul.h); a copy going into row groups is grouped as it
  // goes, so the first rows are grouped and the others in file layout. The product is the
  // reference's either way, with 1 and 2 threads (whose row ranges cut across the split).
  void aMatrixPartlyInItsGroupedCopyGivesTheReferenceProduct_data() {
    QTest::addColumn<int>("type");
    for (TensorType t : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0, TensorType::Q4_K,
                         TensorType::Q5_K, TensorType::Q6_K}) {
      QTest::addRow("%s", gguf::typeName(t).c_str()) << static_cast<int>(t);
    }
  }
  void aMatrixPartlyInItsGroupedCopyGivesTheReferenceProduct() {
    QFETCH(int, type);
    const auto t = static_cast<TensorType>(type);
    const KernelTable& k = kernels();
    if (!k.rowGroups[static_cast<int>(weightKind(t))]) {
      QSKIP("the active kernel level reads this type in file layout only");
    }
    const int64_t rows = 40, cols = 512;
    Matrix m = makeMatrix(t, rows, cols, 5);
    std::vector<uint8_t> copy = m.bytes;
    groupRows(weightKind(t), copy.data(), 16, cols);  // the first two groups copied so far
    m.w.copied = copy.data();
    m.w.copiedRows = 16;
    m.w.copiedRowGroups = true;
    for (int64_t tokens : {1, 3, 9}) {
      const auto x = test::randomValues(static_cast<size_t>(cols * tokens), 6);
      const auto ref = referenceProduct(m.w, x, tokens);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        MatmulScratch scratch;
        std::vector<float> y(ref.size(), NAN);
        matmul(m.w, x.data(), tokens, y.data(), pool, scratch);
        QVERIFY2(test::firstBitDifference(y.data(), ref.data(), ref.size()) < 0,
                 qPrintable(QString("%1 tokens, %2 threads").arg(tokens).arg(threads)));
      }
    }
  }

  // ggml: one token -> vec_dot; 2+ tokens -> tinyBLAS when cols fit its step and rows come in 4s.
  void floatTypesUseTinyBlasOrderForBatchesItCanTake() {
    const Matrix f16 = makeMatrix(TensorType::F16, 8, 64, 1);
    QCOMPARE(dotOrder(f16.w, 1), DotOrder::Vec);
    QCOMPARE(dotOrder(f16.w, 2), DotOrder::Tiled);
    QCOMPARE(dotOrder(makeMatrix(TensorType::F16, 6, 64, 1).w, 2), DotOrder::Vec);
    QCOMPARE(dotOrder(makeMatrix(TensorType::F32, 8, 40, 1).w, 2), DotOrder::Vec);
    QCOMPARE(dotOrder(makeMatrix(TensorType::BF16, 8, 48, 1).w, 2), DotOrder::Vec);
    QCOMPARE(dotOrder(makeMatrix(TensorType::BF16, 8, 64, 1).w, 2), DotOrder::Tiled);
    QCOMPARE(dotOrder(makeMatrix(TensorType::Q8_0, 8, 64, 1).w, 2), DotOrder::Vec);
  }

  // K-quants: llama.cpp's tiled matmul from 8 tokens on (Q4_K: unless its tensor is repacked).
  void kQuantsUseTiledOrderFromEightTokens() {
    for (TensorType t : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
      const Matrix m = makeMatrix(t, 3, 256, 1);
      QCOMPARE(dotOrder(m.w, 1), DotOrder::Vec);
      QCOMPARE(dotOrder(m.w, 7), DotOrder::Vec);
      QCOMPARE(dotOrder(m.w, 8), DotOrder::Tiled);
    }
    for (TensorType t : {TensorType::Q5_K, TensorType::Q6_K}) {
      QCOMPARE(dotOrder(makeMatrix(t, 16, 256, 1).w, 8), DotOrder::Tiled);
    }
  }

  // Q4_K, IQ4_NL, MXFP4 and Q2_K: repacked like Q4_0 when their tensor has 8k rows (block_q4_Kx8,
  // block_iq4_nlx8, block_mxfp4x8, block_q2_Kx8), for every batch; otherwise their own orders.
  void q4_KTensorsOfEightKRowsUseTheRepackedOrder() {
    const Matrix m = makeMatrix(TensorType::Q4_K, 16, 256, 1);
    for (int64_t tokens : {1, 2, 9, 64}) QCOMPARE(dotOrder(m.w, tokens), DotOrder::Repacked);
    WeightMatrix view = m.w;
    view.rows = 4;
    QCOMPARE(dotOrder(view, 9), DotOrder::Repacked);
    for (TensorType t : {TensorType::IQ4_NL, TensorType::MXFP4}) {
      for (int64_t tokens : {1, 2, 9}) {
        QCOMPARE(dotOrder(makeMatrix(t, 16, 64, 1).w, tokens), DotOrder::Repacked);
      }
    }
    QCOMPARE(dotOrder(makeMatrix(TensorType::IQ4_NL, 12, 64, 1).w, 1), DotOrder::Vec);
    QCOMPARE(dotOrder(makeMatrix(TensorType::IQ4_NL, 12, 64, 1).w, 2), DotOrder::Tiled);
    QCOMPARE(dotOrder(makeMatrix(TensorType::MXFP4, 12, 64, 1).w, 9), DotOrder::Vec);
    QCOMPARE(dotOrder(makeMatrix(TensorType::Q2_K, 16, 256, 1).w, 9), DotOrder::Repacked);
    QCOMPARE(dotOrder(makeMatrix(TensorType::Q2_K, 12, 256, 1).w, 9), DotOrder::Tiled);
  }

  // ... and a product's tokens split as llama.cpp hands them to its repacked kernels (Q4_K, Q2_K):
  // whole fours to the gemm (fused every 64 or 128 elements), the rest to the gemv (every 256); a
  // product in the one-token order (decode rows of several sequences) all to the gemv. Checked
  // against the reference, and the two orders differ on these inputs (so the split is visible).
  void q4_KProductsSplitTheirTokensBetweenTheRepackedGemmAndGemv_data() {
    QTest::addColumn<int>("type");
    for (TensorType t : {TensorType::Q4_K, TensorType::Q2_K}) {
      QTest::addRow("%s", gguf::typeName(t).c_str()) << static_cast<int>(t);
    }
  }
  void q4_KProductsSplitTheirTokensBetweenTheRepackedGemmAndGemv() {
    QFETCH(int, type);
    Matrix m = makeMatrix(static_cast<TensorType>(type), 48, 1024, 11);
    ThreadPool pool(2);
    MatmulScratch scratch;
    for (int64_t tokens : {2, 4, 7, 9, 16}) {
      const auto x = test::randomValues(static_cast<size_t>(1024 * tokens), 12);
      for (int64_t orderTokens : {int64_t{0}, int64_t{1}}) {
        const auto ref = referenceProduct(m.w, x, tokens, orderTokens);
        std::vector<float> y(ref.size(), NAN);
        matmul(m.w, x.data(), tokens, y.data(), pool, scratch, orderTokens);
        QVERIFY2(test::firstBitDifference(y.data(), ref.data(), ref.size()) < 0,
                 qPrintable(QString("%1 tokens, order of %2").arg(tokens).arg(orderTokens)));
      }
      if (tokens < 4) continue;
      const auto gemv = referenceProduct(m.w, x, tokens, 1);
      const auto split = referenceProduct(m.w, x, tokens);
      QVERIFY(test::firstBitDifference(split.data(), gemv.data(), gemv.size()) >= 0);
    }
  }

  // Q4_0: llama.cpp repacks a tensor of 8k rows on x86 and runs its repacked kernels for every
  // batch; a view of some of a tensor's rows (a fused matrix's part) goes by the tensor's rows.
  void q4_0TensorsOfEightKRowsUseTheRepackedOrder() {
    const Matrix m = makeMatrix(TensorType::Q4_0, 16, 64, 1);
    for (int64_t tokens : {1, 2, 9, 64}) QCOMPARE(dotOrder(m.w, tokens), DotOrder::Repacked);
    QCOMPARE(dotOrder(makeMatrix(TensorType::Q4_0, 12, 64, 1).w, 9), DotOrder::Vec);
    WeightMatrix view = m.w;
    view.rows = 6;  // rows 0-5 of the 16-row tensor
    QCOMPARE(dotOrder(view, 1), DotOrder::Repacked);
    QCOMPARE(dotOrder(makeMatrix(TensorType::Q4_1, 16, 64, 1).w, 9), DotOrder::Vec);
  }
};

QTEST_GUILESS_MAIN(CpuMatmulTest)
#include "test_cpu_matmul.moc"
