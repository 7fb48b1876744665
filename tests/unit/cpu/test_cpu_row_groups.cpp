// Weight rows in groups of 8 (row_groups.h): the layout round-trips, and every kernel level that
// reads it gives the file layout's results bit for bit, for every order, batch size and row range
// (whole groups, bands of 16, a lone last group, ranges that start or end inside a group).

#include <QtTest>
#include <vector>

#include "engine/error.h"
#include "gemm_level_cases.h"
#include "kernels/cpu/row_groups.h"

using namespace shoal;
using namespace shoal::cpu;

class CpuRowGroupsTest : public QObject {
  Q_OBJECT

 private slots:
  void ungroupingEachRowGivesTheFileLayoutBack_data() {
    QTest::addColumn<int>("type");
    QTest::addRow("q4_0") << static_cast<int>(gguf::TensorType::Q4_0);
    QTest::addRow("q4_1") << static_cast<int>(gguf::TensorType::Q4_1);
    QTest::addRow("q8_0") << static_cast<int>(gguf::TensorType::Q8_0);
    QTest::addRow("q4_K") << static_cast<int>(gguf::TensorType::Q4_K);
    QTest::addRow("q5_K") << static_cast<int>(gguf::TensorType::Q5_K);
    QTest::addRow("q6_K") << static_cast<int>(gguf::TensorType::Q6_K);
    QTest::addRow("iq4_nl") << static_cast<int>(gguf::TensorType::IQ4_NL);
    QTest::addRow("mxfp4") << static_cast<int>(gguf::TensorType::MXFP4);
  }
  void ungroupingEachRowGivesTheFileLayoutBack() {
    QFETCH(int, type);
    const auto t = static_cast<gguf::TensorType>(type);
    const test::Problem p(t, 24, 768, 1, 11);
    std::vector<uint8_t> grouped = p.weights;
    groupRows(weightKind(t), grouped.data(), p.rows, p.cols);
    QVERIFY(grouped != p.weights);  // rearranged, same size
    std::vector<uint8_t> row(p.weightRow);
    for (int64_t r = 0; r < p.rows; ++r) {
      ungroupRow(weightKind(t), grouped.data(), p.cols, r, row.data());
      QVERIFY(std::equal(row.begin(), row.end(), p.weights.begin() + r * p.weightRow));
    }
  }

  void matricesThatDoNotDivideIntoGroupsAreRefused() {
    std::vector<uint8_t> bytes(gguf::rowBytes(gguf::TensorType::Q4_K, 256) * 12);
    QVERIFY_THROWS_EXCEPTION(Error, groupRows(WeightKind::Q4_K, bytes.data(), 12, 256));
    QVERIFY_THROWS_EXCEPTION(Error, groupRows(WeightKind::Q5_0, bytes.data(), 8, 256));
    QVERIFY(hasRowGroups(WeightKind::Q4_K));
    QVERIFY(hasRowGroups(WeightKind::Q5_K));
    QVERIFY(hasRowGroups(WeightKind::Q6_K));
    QVERIFY(hasRowGroups(WeightKind::Q4_0));
    QVERIFY(hasRowGroups(WeightKind::Q8_0));
    QVERIFY(hasRowGroups(WeightKind::Q4_1));
    QVERIFY(hasRowGroups(WeightKind::IQ4_NL));
    QVERIFY(hasRowGroups(WeightKind::MXFP4));
    QVERIFY(!hasRowGroups(WeightKind::Q5_0));
    QVERIFY(!hasRowGroups(gguf::TensorType::F16));
  }

  void groupedKernelsMatchTheFileLayoutBitForBit_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::addColumn<int>("tokens");
    for (gguf::TensorType type :
         {gguf::TensorType::Q4_0, gguf::TensorType::Q4_1, gguf::TensorType::Q8_0,
          gguf::TensorType::Q4_K, gguf::TensorType::Q5_K, gguf::TensorType::Q6_K,
          gguf::TensorType::IQ4_NL, gguf::TensorType::MXFP4}) {
      const std::string name = gguf::typeName(type);
      const int t = static_cast<int>(type);
      // Tokens: the AVX-512 Q4_0/Q4_1/Q8_0 kernels take four per pass over a group (4, 5, 7, 9:
      // whole passes and a remainder) and run bands from 32 (kMaxSideTokens); 33: a side-row set
      // and a lone token.
      for (int tokens : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 20, 31, 32, 33}) {
        // 8: one group; 40: two bands of 16 and a lone group; 56 x 2816: 11 super-blocks.
        QTest::addRow("%s 8x512 t%d", name.c_str(), tokens) << t << 8 << 512 << tokens;
        QTest::addRow("%s 40x256 t%d", name.c_str(), tokens) << t << 40 << 256 << tokens;
        QTest::addRow("%s 56x2816 t%d", name.c_str(), tokens) << t << 56 << 2816 << tokens;
      }
    }
  }
  void groupedKernelsMatchTheFileLayoutBitForBit() {
    QFETCH(int, type);
    QFETCH(int, rows);
    QFETCH(int, cols);
    QFETCH(int, tokens);
    const auto t = static_cast<gguf::TensorType>(type);
    int levels = 0;
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonDot}) {
      const KernelTable* k = kernelsFor(isa);
      if (!k || !k->rowGroups[static_cast<int>(weightKind(t))]) continue;
      ++levels;
      test::Problem p(t, rows, cols, tokens, 100 + rows + tokens);
      test::Problem grouped = p;
      groupRows(weightKind(t), grouped.weights.data(), rows, cols);
      // Whole ranges, ranges on group boundaries (how matmul hands rows to threads) and ranges
      // that cut groups.
      const std::pair<int64_t, int64_t> ranges[] = {
          {0, rows}, {8, rows}, {0, rows - 8}, {3, rows}, {0, rows - 5}, {2, 6}, {5, rows - 1}};
      for (DotOrder order : test::ordersOf(t, cols)) {
        if (order == DotOrder::Tiled && tokens < 2) continue;
        for (auto [b, e] : ranges) {
          if (b >= e) continue;
          const std::vector<float> want = p.run(*k, order, b, e);
          // Without side rows (the kernel computes its own) and with the ones matmul() gives.
          for (bool side : {false, true}) {
            const std::vector<float> got = grouped.run(*k, order, b, e, true, side);
            if (test::firstBitDifference(got.data(), want.data(), want.size()) >= 0) {
              QFAIL(
                  qPrintable(QString("%1, %2 order, rows [%3, %4)%5: differs from the file layout")
                                 .arg(isaName(isa).data())
                                 .arg(test::orderName(order))
                                 .arg(b)
                                 .arg(e)
                                 .arg(side ? ", side rows" : "")));
            }
          }
        }
      }
    }
    if (levels == 0) QSKIP("no kernel level of this CPU reads row groups");
  }
};

QTEST_GUILESS_MAIN(CpuRowGroupsTest)
#include "test_cpu_row_groups.moc"
