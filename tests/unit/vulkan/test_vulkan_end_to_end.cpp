// The Vulkan backend end to end against the CPU backend on the default model (SmolLM2-135M
// Q4_1), under the validation layer, held to the GPU accuracy contract (tests/gpu/
// logit_agreement.h): for each prompt of the subset below (from
// tests/fixtures/llamacpp_smollm2.json) the CPU decodes 64 tokens greedily, and a Vulkan chain
// evaluates the prompt and then the CPU's tokens one at a time (teacher-forced); over all those
// positions the top-1 tokens agree at >= 99% and the mean KL(p_cpu || p_vulkan) is <= 0.01 nats.
// The same holds for a chain of two stages, layers [0, 15) on Vulkan and the rest on the CPU.
//
// Built twice: test_vulkan_end_to_end_exact (SHOAL_TEST_EXACT_MATH) runs the opt-in exact-math
// shader variants (SHOAL_VULKAN_MATH=exact), which round as the CPU does; there, on top of the
// contract, the 64-token greedy continuation of the Vulkan chain is the CPU chain's, except that
// a divergence is allowed at a step where the fixture's top-2 margin is below 0.05 (the
// comparison ends there), the CPU's top-10 logits are within 0.1 at every compared step, and
// the split chain gives the CPU's tokens.
// The default subset keeps the test near a minute on Mesa's lavapipe (a software device);
// SHOAL_VULKAN_E2E_ALL=1 runs every fixture prompt, SHOAL_VULKAN_VALIDATION=0 runs without the
// validation layer (about twice as fast). Skipped without a Vulkan device or model.

#include <QtTest>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
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
#include "tests/gpu/logit_agreement.h"

using namespace shoal;

namespace {

constexpr double kLogitTolerance = 0.1;
constexpr double kSmallMargin = 0.05;
constexpr int32_t kContext = 512;  // the longest fixture prompt (319) plus 64 steps
constexpr int32_t kSplitLayer = 15;
// Prompts compared by default: three of the 13 (192 teacher-forced positions), to stay near a
// minute on lavapipe under the validation layer. SHOAL_VULKAN_E2E_ALL=1 runs all 13 (the
// contract's full 832 positions; several minutes on lavapipe).
const char* const kDefaultPrompts[] = {"raw_short_fact", "raw_code_python", "chat_no_system"};

#ifdef SHOAL_TEST_EXACT_MATH
constexpr bool kExactMath = true;
#else
constexpr bool kExactMath = false;
#endif
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

// A chain's logits at every step of a reference run, teacher-forced: the prompt as one batch
// (its last row's logits), then the reference's tokens one at a time (decode), so one early
// difference cannot snowball into a different text.
std::vector<std::vector<float>> teacherForced(runtime::Chain& chain,
                                              const std::vector<int32_t>& prompt,
                                              const Run& reference) {
  std::vector<std::vector<float>> out;
  chain.truncate(0, 0);
  std::vector<float> logits;
  chain.forward(0, 0, prompt, logits);
  out.push_back(logits);
  int32_t position = static_cast<int32_t>(prompt.size());
  for (size_t step = 0; step + 1 < reference.tokens.size(); ++step) {
    chain.forward(0, position++, std::span(&reference.tokens[step], 1), logits);
    out.push_back(logits);
  }
  return out;
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
  // A fixture's prompt and the CPU's greedy run over as many steps as the fixture records.
  std::pair<std::vector<int32_t>, Run> cpuReference(runtime::Chain& cpu,
                                                    const std::string& name) const {
    const auto& g = fixture(QString::fromStdString(name));
    auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    const size_t steps = g["top2_margin"].get<std::vector<double>>().size();
    Run run = greedy(cpu, prompt, steps);
    return {std::move(prompt), std::move(run)};
  }

 private slots:
  void initTestCase() {
    setenv("SHOAL_VULKAN_VALIDATION", "1", 0);  // unless the caller chose
    setenv("SHOAL_VULKAN_MATH", kExactMath ? "exact" : "native", 1);
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
    qInfo("Vulkan device: %s, %s math", m_vulkan->devices().front().name.c_str(),
          kExactMath ? "exact" : "native");
  }

  // The contract over the prompts together (its top-1 bound is over all positions: one flipped
  // near-tie in 64 steps of one prompt is 98.4%).
  void vulkanChainMeetsTheAccuracyContract() {
    gpu_test::LogitAgreement agreement;
    const char* all = std::getenv("SHOAL_VULKAN_E2E_ALL");
    std::vector<std::string> names;
    if (all && std::string(all) == "1") {
      for (const auto& g : m_fixtures["greedy"]) names.push_back(g["name"].get<std::string>());
    } else {
      names.assign(std::begin(kDefaultPrompts), std::end(kDefaultPrompts));
    }
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(m_vulkan->createStage(m_deviceId, source(), spec(0, m_config->nLayer)));
    runtime::Chain vk(std::move(stages));
    auto cpu = cpuChain();
    for (const std::string& name : names) {
      const auto [prompt, want] = cpuReference(*cpu, name);
      const size_t steps = want.tokens.size();
      const auto got = teacherForced(vk, prompt, want);
      gpu_test::LogitAgreement one;
      for (size_t step = 0; step < steps; ++step) {
        agreement.add(want.logits[step], got[step]);
        one.add(want.logits[step], got[step]);
      }
      qInfo("%s: top-1 %.4f, mean KL %.3g nats, max KL %.3g", name.c_str(), one.top1Agreement(),
            one.meanKl(), one.maxKl());
    }
    qInfo(
        "all %zu positions: top-1 agreement %.4f, mean KL %.3g nats, max KL %.3g, largest "
        "margin at a miss %.3g, decisive top-1 %.4f of %zu",
        agreement.positions(), agreement.top1Agreement(), agreement.meanKl(), agreement.maxKl(),
        agreement.maxMissMargin(), agreement.decisiveTop1Agreement(),
        agreement.decisivePositions());
    QVERIFY2(agreement.meetsContract(), qPrintable(QString("top-1 %1, mean KL %2")
                                                       .arg(agreement.top1Agreement())
                                                       .arg(agreement.meanKl())));
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
    if (!kExactMath) QSKIP("greedy texts are compared in exact math only (the contract above)");
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
    const auto got = teacherForced(split, prompt, want);
    gpu_test::LogitAgreement agreement;
    size_t identical = 0;
    for (size_t s = 0; s < steps; ++s) {
      agreement.add(want.logits[s], got[s]);
      identical += got[s] == want.logits[s] ? 1 : 0;
    }
    qInfo("split chain: top-1 %.4f, mean KL %.3g nats, %zu/%zu steps with bit-identical logits",
          agreement.top1Agreement(), agreement.meanKl(), identical, steps);
    QVERIFY2(agreement.meetsContract(), qPrintable(QString("top-1 %1, mean KL %2")
                                                       .arg(agreement.top1Agreement())
                                                       .arg(agreement.meanKl())));
    if (kExactMath) QCOMPARE(greedy(split, prompt, steps).tokens, want.tokens);
  }

  // Where the contract's bounds come from. A CPU run that differs from the reference only by
  // rounding (the same model evaluated with every continuation token in one batch: the matmuls'
  // and attention's batch orders instead of the decode orders) sits inside them, and a kernel
  // bug of the kind a GPU port makes (the Q4_1 minimum term dropped from one matrix, layer 15's
  // ffn_down, emulated by zeroing its blocks' m) falls outside. Both on the CPU: no device needed.
  void theContractAdmitsRoundingAndRejectsADroppedMinimum() {
    if (kExactMath) QSKIP("a property of the contract: measured once, in the default build");
    std::vector<std::string> names(std::begin(kDefaultPrompts), std::end(kDefaultPrompts));
    // The model with a dropped minimum: the same bytes, m zeroed in every block of one matrix.
    const auto modelPath =
        std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    std::vector<uint8_t> bytes(std::filesystem::file_size(modelPath));
    std::ifstream(modelPath, std::ios::binary)
        .read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
    const gguf::File broken = gguf::File::fromBuffer(bytes, "dropped-minimum");
    size_t zeroed = 0;
    for (const gguf::TensorInfo& t : broken.tensors()) {
      if (t.type != gguf::TensorType::Q4_1 || t.name != "blk.15.ffn_down.weight") {
        continue;
      }
      const size_t offset = size_t(t.data - bytes.data());
      for (int64_t b = 0; b < t.elementCount() / 32; ++b) {
        std::memset(&bytes[offset + size_t(b) * 20 + 2], 0, 2);  // BlockQ4_1::m
        ++zeroed;
      }
    }
    QVERIFY(zeroed > 0);
    const model::ModelWeights brokenWeights = model::ModelWeights::bind(broken, *m_config);
    auto brokenStage = m_cpu->createStage("cpu0", {&broken, m_config.get(), &brokenWeights},
                                          spec(0, m_config->nLayer));
    auto batchStage = m_cpu->createStage("cpu0", source(), spec(0, m_config->nLayer));

    gpu_test::LogitAgreement reordered, dropped;
    double errorSquares = 0, referenceSquares = 0;  // the reordered run's logits NMSE
    auto cpu = cpuChain();
    for (const std::string& name : names) {
      const auto [prompt, want] = cpuReference(*cpu, name);
      const size_t steps = want.tokens.size();
      // The prompt and the reference's continuation in one batch: rows prompt.size() - 1 on
      // predict the same steps.
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), want.tokens.begin(), want.tokens.end() - 1);
      for (auto* run : {&reordered, &dropped}) {
        runtime::Stage& stage = run == &reordered ? *batchStage : *brokenStage;
        stage.truncate(0, 0);
        const runtime::Segment segment{0, 0, int32_t(all.size()), runtime::LogitRows::All};
        runtime::Batch batch;
        batch.tokens = all;
        batch.segments = std::span(&segment, 1);
        runtime::StageOutput out;
        stage.forward(batch, out);
        const size_t vocab = want.logits.front().size();
        for (size_t step = 0; step < steps; ++step) {
          const size_t row = prompt.size() - 1 + step;
          run->add(want.logits[step], std::span(out.logits).subspan(row * vocab, vocab));
          if (run != &reordered) continue;
          for (size_t i = 0; i < vocab; ++i) {
            const double d = double(out.logits[row * vocab + i]) - want.logits[step][i];
            errorSquares += d * d;
            referenceSquares += double(want.logits[step][i]) * want.logits[step][i];
          }
        }
      }
    }
    qInfo(
        "CPU in batch order: top-1 %.4f, mean KL %.3g nats (%zu positions), largest margin "
        "at a miss %.3g, decisive top-1 %.4f of %zu, logits NMSE %.3g",
        reordered.top1Agreement(), reordered.meanKl(), reordered.positions(),
        reordered.maxMissMargin(), reordered.decisiveTop1Agreement(), reordered.decisivePositions(),
        errorSquares / referenceSquares);
    qInfo("dropped minimum in blk.15.ffn_down: top-1 %.4f, mean KL %.3g nats",
          dropped.top1Agreement(), dropped.meanKl());
    QVERIFY2(reordered.meetsContract(), "a reordered CPU run falls outside the contract");
    QVERIFY2(!dropped.meetsContract(), "a dropped minimum term passes the contract");
  }

  void validationLayerReportedNoErrors() { QCOMPARE(vulkan::validationErrorCount(), 0); }
};

QTEST_GUILESS_MAIN(VulkanEndToEndTest)
#include "test_vulkan_end_to_end.moc"
