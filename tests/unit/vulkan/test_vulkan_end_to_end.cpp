// The Vulkan backend end to end against the CPU backend on the default model (SmolLM2-135M
// Q4_1), under the validation layer. The CPU backend reproduces llama.cpp bit for bit; the
// Vulkan kernels round as the CPU's do (kernels/vulkan/shaders/exact.glsl), so:
//  * for each prompt of the subset below (from tests/fixtures/llamacpp_smollm2.json), the
//    64-token greedy continuation of a one-stage Vulkan chain is the CPU chain's, except that a
//    divergence is allowed at a step where the fixture's top-2 margin is below 0.05 (the
//    comparison ends there), and at every compared step the CPU's top-10 logits are within 0.1;
//  * a chain of two stages, layers [0, 15) on Vulkan and the rest on the CPU, gives the tokens
//    of one CPU stage.
// The default subset keeps the test near a minute on Mesa's lavapipe (a software device);
// SHOAL_VULKAN_E2E_ALL=1 runs every fixture prompt, SHOAL_VULKAN_VALIDATION=0 runs without the
// validation layer (about twice as fast). Skipped without a Vulkan device or model.
//
// Built twice: test_vulkan_end_to_end_native_math (SHOAL_TEST_NATIVE_MATH) forces the shader
// variants that devices without shaderFloat64 run (driver fma/division, float accumulators), so
// the same margin and logit rules check that path here too; its logits are not expected to be
// bit-identical to the CPU's.

#include <QtTest>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/chain.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/vulkan/vk_loader.h"
#include "kernels/vulkan/vulkan_backend.h"

using namespace shoal;

namespace {

constexpr double kLogitTolerance = 0.1;
constexpr double kSmallMargin = 0.05;
constexpr int32_t kContext = 512;  // the longest fixture prompt (319) plus 64 steps
constexpr int32_t kSplitLayer = 15;
// Prompts compared by default: one, to stay well under a minute on lavapipe under the validation
// layer (about 25 s). SHOAL_VULKAN_E2E_ALL=1 runs all 13 (several minutes on lavapipe).
const char* const kDefaultPrompts[] = {"raw_short_fact"};
constexpr size_t kSplitSteps = 16;

nlohmann::json loadFixtures() {
  std::ifstream in(std::string(SHOAL_FIXTURES_DIR) + "/llamacpp_smollm2.json");
  return nlohmann::json::parse(in);
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The ids of the k largest logits.
std::vector<int32_t> topIds(const std::vector<float>& v, size_t k) {
  std::vector<int32_t> ids(v.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](int32_t a, int32_t b) { return v[size_t(a)] > v[size_t(b)]; });
  ids.resize(k);
  return ids;
}

// A greedy run: the tokens chosen and the logits each was chosen from.
struct Run {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

Run greedy(runtime::Chain& chain, const std::vector<int32_t>& prompt, size_t steps) {
  Run run;
  chain.truncate(0, 0);
  std::vector<float> logits;
  chain.forward(0, 0, prompt, logits);
  int32_t position = static_cast<int32_t>(prompt.size());
  for (size_t step = 0; step < steps; ++step) {
    const int32_t token = argmax(logits);
    run.tokens.push_back(token);
    run.logits.push_back(logits);
    if (step + 1 < steps) chain.forward(0, position++, std::span(&token, 1), logits);
  }
  return run;
}

}  // namespace

class VulkanEndToEndTest : public QObject {
  Q_OBJECT

  nlohmann::json m_fixtures;
  std::unique_ptr<gguf::File> m_file;
  std::unique_ptr<model::ModelConfig> m_config;
  std::unique_ptr<model::ModelWeights> m_weights;
  std::unique_ptr<cpu::CpuBackend> m_cpu;
  std::unique_ptr<vulkan::VulkanBackend> m_vulkan;
  std::string m_deviceId;

  runtime::ModelSource source() const { return {m_file.get(), m_config.get(), m_weights.get()}; }
  runtime::StageSpec spec(int32_t first, int32_t last) const {
    runtime::StageSpec s;
    s.firstLayer = first;
    s.lastLayer = last;
    s.hasEmbedding = first == 0;
    s.hasHead = last == m_config->nLayer;
    s.contextLength = kContext;
    s.maxBatch = kContext;
    return s;
  }
  std::unique_ptr<runtime::Chain> cpuChain() {
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(m_cpu->createStage("cpu0", source(), spec(0, m_config->nLayer)));
    return std::make_unique<runtime::Chain>(std::move(stages));
  }
  const nlohmann::json& fixture(const QString& name) const {
    for (const auto& g : m_fixtures["greedy"])
      if (QString::fromStdString(g["name"].get<std::string>()) == name) return g;
    throw std::runtime_error("no fixture prompt " + name.toStdString());
  }

 private slots:
  void initTestCase() {
    setenv("SHOAL_VULKAN_VALIDATION", "1", 0);  // unless the caller chose
#ifdef SHOAL_TEST_NATIVE_MATH
    setenv("SHOAL_VULKAN_NATIVE_MATH", "1", 1);
#endif
    const auto modelPath =
        std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(modelPath)) QSKIP("default model absent (run scripts/setup)");
    m_vulkan = std::make_unique<vulkan::VulkanBackend>();
    const auto a = m_vulkan->availability();
    if (!a.available)
      QSKIP(qPrintable("no usable Vulkan device: " + QString::fromStdString(a.reason)));
    m_deviceId = m_vulkan->devices().front().id;
    m_fixtures = loadFixtures();
    m_file = std::make_unique<gguf::File>(gguf::File::open(modelPath));
    m_config = std::make_unique<model::ModelConfig>(model::ModelConfig::fromGguf(*m_file));
    m_weights =
        std::make_unique<model::ModelWeights>(model::ModelWeights::bind(*m_file, *m_config));
    m_cpu = std::make_unique<cpu::CpuBackend>(2);
    qInfo("Vulkan device: %s", m_vulkan->devices().front().name.c_str());
  }

  void vulkanChainMatchesCpuGreedyAndTopLogits_data() {
    QTest::addColumn<QString>("name");
    const char* all = std::getenv("SHOAL_VULKAN_E2E_ALL");
    if (all && std::string(all) == "1") {
      const nlohmann::json fixtures = loadFixtures();  // outlives the loop
      for (const auto& g : fixtures["greedy"]) {
        const std::string n = g["name"].get<std::string>();
        QTest::newRow(n.c_str()) << QString::fromStdString(n);
      }
    } else {
      for (const char* n : kDefaultPrompts) QTest::newRow(n) << QString(n);
    }
  }
  void vulkanChainMatchesCpuGreedyAndTopLogits() {
    QFETCH(QString, name);
    const auto& g = fixture(name);
    const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    const auto margins = g["top2_margin"].get<std::vector<double>>();
    const size_t steps = margins.size();

    const auto t0 = std::chrono::steady_clock::now();
    const Run want = greedy(*cpuChain(), prompt, steps);
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(m_vulkan->createStage(m_deviceId, source(), spec(0, m_config->nLayer)));
    runtime::Chain vk(std::move(stages));
    const Run got = greedy(vk, prompt, steps);
    const auto t2 = std::chrono::steady_clock::now();

    double maxDiff = 0;
    size_t identicalSteps = 0;
    int divergedAt = -1;
    for (size_t step = 0; step < steps; ++step) {
      for (int32_t id : topIds(want.logits[step], 10)) {
        maxDiff = std::max(maxDiff, double(std::fabs(got.logits[step][size_t(id)] -
                                                     want.logits[step][size_t(id)])));
      }
      if (got.logits[step] == want.logits[step]) ++identicalSteps;
      if (got.tokens[step] != want.tokens[step]) {
        QVERIFY2(margins[step] < kSmallMargin,
                 qPrintable(QString("step %1: Vulkan token %2, CPU %3, fixture top-2 margin %4")
                                .arg(step)
                                .arg(got.tokens[step])
                                .arg(want.tokens[step])
                                .arg(margins[step])));
        divergedAt = static_cast<int>(step);
        break;
      }
    }
    using Seconds = std::chrono::duration<double>;
    qInfo(
        "%s (%zu prompt tokens): top-10 max |diff| %.6g, logits bit-identical at %zu steps, "
        "%s; CPU %.1f s, Vulkan %.1f s",
        qPrintable(name), prompt.size(), maxDiff, identicalSteps,
        divergedAt < 0 ? "64/64 tokens identical"
                       : qPrintable(QString("allowed divergence at step %1 (margin %2)")
                                        .arg(divergedAt)
                                        .arg(margins[size_t(divergedAt)])),
        Seconds(t1 - t0).count(), Seconds(t2 - t1).count());
    QVERIFY2(maxDiff <= kLogitTolerance, qPrintable(QString("top-10 logit diff %1").arg(maxDiff)));
  }

  void vulkanLayersThenCpuLayersGiveOneCpuStagesTokens() {
    const auto& g = fixture("raw_story_start");
    const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    const size_t steps = kSplitSteps;
    const Run want = greedy(*cpuChain(), prompt, steps);
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(m_vulkan->createStage(m_deviceId, source(), spec(0, kSplitLayer)));
    stages.push_back(m_cpu->createStage("cpu0", source(), spec(kSplitLayer, m_config->nLayer)));
    runtime::Chain split(std::move(stages));
    const Run got = greedy(split, prompt, steps);
    QCOMPARE(got.tokens, want.tokens);
    size_t identical = 0;
    for (size_t s = 0; s < steps; ++s) identical += got.logits[s] == want.logits[s] ? 1 : 0;
    qInfo("split chain: %zu/%zu steps with bit-identical logits", identical, steps);
  }

  void validationLayerReportedNoErrors() { QCOMPARE(vulkan::validationErrorCount(), 0); }
};

QTEST_GUILESS_MAIN(VulkanEndToEndTest)
#include "test_vulkan_end_to_end.moc"
