// File-name rules of GGUF repositories: split parts, quantization names, grouping into models.

#include <QtTest>

#include "lan/hub/hub_client.h"

using namespace shoal::lan::hub;

class TestHubNames : public QObject {
  Q_OBJECT

 private slots:
  void splitPartIsParsed() {
    const SplitName s = parseSplitName("dir/Model-Q4_K_M-00002-of-00005.gguf");
    QCOMPARE(s.base, std::string("dir/Model-Q4_K_M"));
    QCOMPARE(s.part, 2);
    QCOMPARE(s.count, 5);
  }

  void plainFileIsNotASplit() {
    const SplitName s = parseSplitName("SmolLM2-135M-Instruct.Q4_1.gguf");
    QCOMPARE(s.part, 0);
    QCOMPARE(s.count, 0);
    QCOMPARE(s.base, std::string("SmolLM2-135M-Instruct.Q4_1"));
  }

  void impossiblePartNumbersAreNotASplit() {
    QCOMPARE(parseSplitName("m-00000-of-00002.gguf").part, 0);
    QCOMPARE(parseSplitName("m-00003-of-00002.gguf").part, 0);
    QCOMPARE(parseSplitName("m-001-of-002.gguf").part, 0);  // not llama.cpp's %05d
    QCOMPARE(parseSplitName("m-00001-of-00002.bin").part, 0);
  }

  void quantizationIsTheLastTypeToken() {
    QCOMPARE(quantizationFromName("Qwen2.5-7B-Instruct-Q4_K_M.gguf"), std::string("Q4_K_M"));
    QCOMPARE(quantizationFromName("SmolLM2-135M-Instruct.Q4_1.gguf"), std::string("Q4_1"));
    QCOMPARE(quantizationFromName("llama-3-8b-iq4_xs.gguf"), std::string("IQ4_XS"));
    QCOMPARE(quantizationFromName("phi-3-mini-f16.gguf"), std::string("F16"));
    QCOMPARE(quantizationFromName("gemma-BF16-00001-of-00002.gguf"), std::string("BF16"));
    QCOMPARE(quantizationFromName("sub/Model-UD-Q4_K_XL.gguf"), std::string("Q4_K_XL"));
    QCOMPARE(quantizationFromName("IQ2_XXS/big-IQ2_XXS-00001-of-00003.gguf"),
             std::string("IQ2_XXS"));
  }

  void noQuantizationGivesEmpty() {
    QCOMPARE(quantizationFromName("Qwen2-model.gguf"), std::string());
    QCOMPARE(quantizationFromName("README.md"), std::string());
  }

  void splitPartsAreGroupedInOrder() {
    const std::vector<RepoFile> files = {
        {"README.md", 10, ""},
        {"big-Q8_0-00002-of-00002.gguf", 200, std::string(64, 'b')},
        {"small-Q4_0.gguf", 50, std::string(64, 'c')},
        {"big-Q8_0-00001-of-00002.gguf", 300, std::string(64, 'a')},
    };
    const auto models = groupModels(files);
    QCOMPARE(models.size(), size_t{2});
    const ModelFile& big = models[0];
    QCOMPARE(big.name, std::string("big-Q8_0-00001-of-00002.gguf"));
    QCOMPARE(big.quantization, std::string("Q8_0"));
    QCOMPARE(big.parts.size(), size_t{2});
    QCOMPARE(big.parts[0].path, std::string("big-Q8_0-00001-of-00002.gguf"));
    QCOMPARE(big.parts[1].path, std::string("big-Q8_0-00002-of-00002.gguf"));
    QCOMPARE(big.totalBytes, uint64_t{500});
    QVERIFY(big.complete);
    const ModelFile& small = models[1];
    QCOMPARE(small.name, std::string("small-Q4_0.gguf"));
    QCOMPARE(small.parts.size(), size_t{1});
    QCOMPARE(small.totalBytes, uint64_t{50});
    QVERIFY(small.complete);
  }

  void incompleteSplitSetIsMarked() {
    const std::vector<RepoFile> files = {
        {"m-00001-of-00003.gguf", 1, ""},
        {"m-00003-of-00003.gguf", 3, ""},
    };
    const auto models = groupModels(files);
    QCOMPARE(models.size(), size_t{1});
    QVERIFY(!models[0].complete);
    QCOMPARE(models[0].parts.size(), size_t{2});
    QCOMPARE(models[0].totalBytes, uint64_t{4});
  }

  void splitMissingItsFirstPartKeepsTheFirstPartsName() {
    const auto models = groupModels({{"m-00002-of-00002.gguf", 1, ""}});
    QCOMPARE(models.size(), size_t{1});
    QCOMPARE(models[0].name, std::string("m-00001-of-00002.gguf"));
    QVERIFY(!models[0].complete);
  }

  void visionProjectorsAndOtherFilesAreNotModels() {
    const auto models = groupModels(
        {{"mmproj-model-f16.gguf", 1, ""}, {"config.json", 1, ""}, {"model.Q4_1.GGUF", 2, ""}});
    QCOMPARE(models.size(), size_t{1});
    QCOMPARE(models[0].name, std::string("model.Q4_1.GGUF"));
  }
};

QTEST_APPLESS_MAIN(TestHubNames)
#include "test_hub_names.moc"
