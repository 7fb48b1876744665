// The Vulkan stage runs each architecture's layer program (engine/model/arch/) and the batch
// interface, on small synthetic models (no model file needed):
//  * llama, qwen2 (Q/K/V biases) and qwen3 (per-head Q/K norms, NeoX RoPE) give the CPU
//    backend's logits for a prompt and a few decode steps: bit for bit where the device runs the
//    exact-math kernels (Q8_0 weights pair with the integer kernels that round as the CPU's),
//    within a small error otherwise;
//  * a batch of two segments (two sequences) gives what two separate runs give, for a head stage
//    (logits rows in row order; the CPU backend's too, where the math is exact) and a stage
//    without the head (hidden rows);
//  * the Last logits row is the last row of All, and None returns no logits but caches the
//    positions; a SampleRequest still gets logits (the stage does not sample);
//  * a stage holding only the head (no layer) picks the logits rows itself;
//  * a program with a sliding attention window is refused when it is shorter than the context
//    (no kernel masks it yet) and runs as full attention when it covers the context.
// Under the validation layer, which must report no error. Skipped without a Vulkan device.

#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/architecture.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/synthetic_model.h"
#include "engine/runtime/chain.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/vulkan/vk_loader.h"
#include "kernels/vulkan/vulkan_backend.h"

using namespace shoal;
using runtime::LogitRows;

namespace {

constexpr int32_t kContext = 64;

// A synthetic model on disk, loaded.
struct TestModel {
  gguf::File file;
  model::ModelConfig config;
  model::ModelWeights weights;
  runtime::ModelSource source() const { return {&file, &config, &weights}; }
};

std::unique_ptr<TestModel> loadModel(const std::filesystem::path& path) {
  auto file = gguf::File::open(path);
  auto config = model::ModelConfig::fromGguf(file);
  auto weights = model::ModelWeights::bind(file, config);
  return std::make_unique<TestModel>(
      TestModel{std::move(file), std::move(config), std::move(weights)});
}

runtime::StageSpec specFor(const model::ModelConfig& c, int32_t first, int32_t last,
                           int32_t sequences = 1) {
  runtime::StageSpec s;
  s.firstLayer = first;
  s.lastLayer = last;
  s.hasEmbedding = first == 0;
  s.hasHead = last == c.nLayer;
  s.contextLength = kContext;
  s.maxBatch = kContext;
  s.maxSequences = sequences;
  return s;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

std::vector<float> slice(const std::vector<float>& v, size_t first, size_t count) {
  return {v.begin() + std::ptrdiff_t(first), v.begin() + std::ptrdiff_t(first + count)};
}

// llama's program with an attention window of g_window positions (a plain function, as
// Architecture::layerProgram is).
int32_t g_window = 0;
model::LayerProgram windowedLlama(const model::ModelConfig& c, int32_t layer) {
  model::LayerProgram p = model::findArchitecture("llama")->layerProgram(c, layer);
  for (model::Op& op : p.ops) {
    if (op.kind == model::OpKind::Attend) op.attend.window = g_window;
  }
  p.window = g_window;
  return p;
}

const std::vector<int32_t> kPromptA = {1, 45, 300, 7, 99, 123, 5, 260, 17};
const std::vector<int32_t> kPromptB = {1, 80, 81, 82};

}  // namespace

class VulkanLayerProgramTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::unique_ptr<vulkan::VulkanBackend> m_vulkan;
  std::unique_ptr<cpu::CpuBackend> m_cpu;
  std::string m_deviceId;
  bool m_exact = false;

  std::filesystem::path writeModel(const std::string& architecture) {
    model::SyntheticModelSpec spec;
    spec.architecture = architecture;
    spec.nLayer = 2;
    spec.nEmbd = 256;
    spec.nHead = 4;
    spec.nHeadKv = 2;
    spec.nFf = 512;
    spec.nVocab = 320;
    spec.tiedOutput = architecture == "qwen3";
    if (architecture == "qwen3moe") {
      spec.nExpert = 4;
      spec.nExpertUsed = 2;
    }
    spec.seed = 7;
    const std::filesystem::path path =
        m_dir.filePath(QString::fromStdString(architecture) + ".gguf").toStdString();
    if (!std::filesystem::exists(path)) model::writeSyntheticModel(spec, path);
    return path;
  }

  std::unique_ptr<runtime::Stage> vulkanStage(const TestModel& m, int32_t first, int32_t last,
                                              int32_t sequences = 1) {
    return m_vulkan->createStage(m_deviceId, m.source(), specFor(m.config, first, last, sequences));
  }

 private slots:
  void initTestCase() {
    setenv("SHOAL_VULKAN_VALIDATION", "1", 0);  // unless the caller chose
    QVERIFY(m_dir.isValid());
    m_vulkan = std::make_unique<vulkan::VulkanBackend>();
    const auto a = m_vulkan->availability();
    if (!a.available)
      QSKIP(qPrintable("no usable Vulkan device: " + QString::fromStdString(a.reason)));
    m_deviceId = m_vulkan->devices().front().id;
    m_exact = m_vulkan->device(m_deviceId)->exactMath();
    m_cpu = std::make_unique<cpu::CpuBackend>(2);
    qInfo("Vulkan device: %s (%s math)", m_vulkan->devices().front().name.c_str(),
          m_exact ? "exact" : "native");
  }

  void architectureMatchesCpu_data() {
    QTest::addColumn<QString>("architecture");
    for (const char* a : {"llama", "qwen2", "qwen3"}) QTest::newRow(a) << QString(a);
  }
  void architectureMatchesCpu() {
    QFETCH(QString, architecture);
    const auto m = loadModel(writeModel(architecture.toStdString()));
    const int32_t layers = m->config.nLayer;
    std::vector<std::unique_ptr<runtime::Stage>> cpuStages, vkStages;
    cpuStages.push_back(m_cpu->createStage("cpu0", m->source(), specFor(m->config, 0, layers)));
    vkStages.push_back(vulkanStage(*m, 0, layers));
    runtime::Chain cpuChain(std::move(cpuStages)), vkChain(std::move(vkStages));

    // The prompt with every row's logits, then decode steps on the CPU's greedy tokens.
    std::vector<float> want, got;
    cpuChain.forward(0, 0, kPromptA, want, true);
    vkChain.forward(0, 0, kPromptA, got, true);
    QVERIFY(*std::max_element(want.begin(), want.end()) >
            *std::min_element(want.begin(), want.end()) + 1e-3f);  // not a degenerate model
    double worst = maxAbsDiff(got, want);
    bool identical = got == want;
    QCOMPARE(got.size(), want.size());
    int32_t position = static_cast<int32_t>(kPromptA.size());
    for (int step = 0; step < 4; ++step) {
      const int32_t token =
          argmax(slice(want, want.size() - size_t(m->config.nVocab), size_t(m->config.nVocab)));
      cpuChain.forward(0, position, std::span(&token, 1), want);
      vkChain.forward(0, position, std::span(&token, 1), got);
      ++position;
      QCOMPARE(got.size(), want.size());
      worst = std::max(worst, maxAbsDiff(got, want));
      identical = identical && got == want;
    }
    qInfo("%s: max |logit diff| %.3g, %s", qPrintable(architecture), worst,
          identical ? "bit-identical" : "not bit-identical");
    if (m_exact) {
      QVERIFY2(identical, qPrintable(QString("max |diff| %1").arg(worst)));
    } else {
      QVERIFY2(worst < 1e-2, qPrintable(QString("max |diff| %1").arg(worst)));
    }
  }

  void twoSegmentBatchMatchesSeparateRuns() {
    const auto m = loadModel(writeModel("qwen3"));
    const int32_t layers = m->config.nLayer;
    const size_t vocab = size_t(m->config.nVocab), d = size_t(m->config.nEmbd);
    auto separate = vulkanStage(*m, 0, layers, 2), batched = vulkanStage(*m, 0, layers, 2);
    auto separateFirst = vulkanStage(*m, 0, 1, 2), batchedFirst = vulkanStage(*m, 0, 1, 2);

    // Prompts: A wants every row's logits, B only its last.
    std::vector<float> wantLogits, wantHidden;
    runtime::StageOutput out;
    const runtime::Segment a{0, 0, int32_t(kPromptA.size()), LogitRows::All};
    const runtime::Segment b{1, 0, int32_t(kPromptB.size()), LogitRows::Last};
    for (auto [segment, prompt] : {std::pair{a, &kPromptA}, std::pair{b, &kPromptB}}) {
      const runtime::Segment one[] = {segment};
      separate->forward(runtime::Batch{*prompt, {}, one}, out);
      wantLogits.insert(wantLogits.end(), out.logits.begin(), out.logits.end());
      separateFirst->forward(runtime::Batch{*prompt, {}, one}, out);
      wantHidden.insert(wantHidden.end(), out.hidden.begin(), out.hidden.end());
    }
    std::vector<int32_t> tokens = kPromptA;
    tokens.insert(tokens.end(), kPromptB.begin(), kPromptB.end());
    const runtime::Segment both[] = {a, b};
    const runtime::SampleRequest greedy;
    batched->forward(runtime::Batch{tokens, {}, both, &greedy}, out);
    QVERIFY(out.tokens.empty());  // no sampling on the stage: logits come back
    QCOMPARE(out.logits.size(), (kPromptA.size() + 1) * vocab);
    QVERIFY(out.logits == wantLogits);
    // The CPU backend runs the two segments as one batch; the rows are the same.
    auto cpuStage = m_cpu->createStage("cpu0", m->source(), specFor(m->config, 0, layers, 2));
    runtime::StageOutput cpuOut;
    cpuStage->forward(runtime::Batch{tokens, {}, both}, cpuOut);
    if (m_exact) QVERIFY(cpuOut.logits == out.logits);
    batchedFirst->forward(runtime::Batch{tokens, {}, both}, out);
    QCOMPARE(out.hidden.size(), tokens.size() * d);
    QVERIFY(out.hidden == wantHidden);
    QCOMPARE(batched->cachedPositions(0), int32_t(kPromptA.size()));
    QCOMPARE(batched->cachedPositions(1), int32_t(kPromptB.size()));

    // One decode step of each sequence, in the opposite order.
    const int32_t next[] = {42, 43};
    const runtime::Segment stepB{1, int32_t(kPromptB.size()), 1, LogitRows::Last};
    const runtime::Segment stepA{0, int32_t(kPromptA.size()), 1, LogitRows::Last};
    wantLogits.clear();
    for (auto [segment, token] : {std::pair{stepB, &next[0]}, std::pair{stepA, &next[1]}}) {
      const runtime::Segment one[] = {segment};
      separate->forward(runtime::Batch{std::span(token, 1), {}, one}, out);
      wantLogits.insert(wantLogits.end(), out.logits.begin(), out.logits.end());
    }
    const runtime::Segment steps[] = {stepB, stepA};
    batched->forward(runtime::Batch{next, {}, steps}, out);
    QCOMPARE(out.logits.size(), 2 * vocab);
    QVERIFY(out.logits == wantLogits);
  }

  void logitRowsSelectTheRows() {
    const auto m = loadModel(writeModel("llama"));
    const int32_t layers = m->config.nLayer;
    const size_t vocab = size_t(m->config.nVocab);
    auto stage = vulkanStage(*m, 0, layers);
    const int32_t n = int32_t(kPromptA.size());
    const int32_t token = 9;
    const runtime::Segment step[] = {{0, n, 1, LogitRows::Last}};
    runtime::StageOutput all, afterAll, last, none, afterNone;
    const runtime::Segment allRows[] = {{0, 0, n, LogitRows::All}};
    stage->forward(runtime::Batch{kPromptA, {}, allRows}, all);
    QCOMPARE(all.logits.size(), size_t(n) * vocab);
    stage->forward(runtime::Batch{std::span(&token, 1), {}, step}, afterAll);

    stage->truncate(0, 0);
    const runtime::Segment lastRow[] = {{0, 0, n, LogitRows::Last}};
    stage->forward(runtime::Batch{kPromptA, {}, lastRow}, last);
    QCOMPARE(last.logits.size(), vocab);
    QVERIFY(last.logits == slice(all.logits, (size_t(n) - 1) * vocab, vocab));

    // No logits: nothing comes back, but the positions are cached as with logits.
    stage->truncate(0, 0);
    const runtime::Segment noRows[] = {{0, 0, n, LogitRows::None}};
    stage->forward(runtime::Batch{kPromptA, {}, noRows}, none);
    QVERIFY(none.logits.empty());
    QCOMPARE(stage->cachedPositions(0), n);
    stage->forward(runtime::Batch{std::span(&token, 1), {}, step}, afterNone);
    QVERIFY(afterNone.logits == afterAll.logits);
  }

  void stageWithOnlyTheHeadGivesTheLogitsRows() {
    const auto m = loadModel(writeModel("qwen2"));
    const int32_t layers = m->config.nLayer;
    const size_t vocab = size_t(m->config.nVocab);
    runtime::StageSpec bodySpec = specFor(m->config, 0, layers);
    bodySpec.hasHead = false;
    auto body = m_vulkan->createStage(m_deviceId, m->source(), bodySpec);
    auto head = vulkanStage(*m, layers, layers);
    auto whole = vulkanStage(*m, 0, layers);
    const int32_t n = int32_t(kPromptA.size());
    runtime::StageOutput hidden, got, want;
    const runtime::Segment all[] = {{0, 0, n, LogitRows::All}};
    body->forward(runtime::Batch{kPromptA, {}, all}, hidden);
    QCOMPARE(hidden.hidden.size(), size_t(n) * size_t(m->config.nEmbd));
    whole->forward(runtime::Batch{kPromptA, {}, all}, want);
    for (LogitRows rows : {LogitRows::All, LogitRows::Last}) {
      head->truncate(0, 0);
      const runtime::Segment segment[] = {{0, 0, n, rows}};
      head->forward(runtime::Batch{{}, hidden.hidden, segment}, got);
      if (rows == LogitRows::All) {
        QVERIFY(got.logits == want.logits);
      } else {
        QVERIFY(got.logits == slice(want.logits, (size_t(n) - 1) * vocab, vocab));
      }
    }
  }

  void slidingWindowIsRefusedUnlessItCoversTheContext() {
    const auto m = loadModel(writeModel("llama"));
    model::Architecture windowed = *model::findArchitecture("llama");
    windowed.layerProgram = windowedLlama;
    model::ModelConfig config = m->config;
    config.arch = &windowed;
    const runtime::ModelSource source{&m->file, &config, &m->weights};
    const runtime::StageSpec spec = specFor(config, 0, config.nLayer);

    g_window = 8;
    QString refusal;
    try {
      m_vulkan->createStage(m_deviceId, source, spec);
    } catch (const Error& e) {
      refusal = e.what();
    }
    QVERIFY2(refusal.contains("sliding-window attention"), qPrintable(refusal));

    g_window = kContext;  // every cached position is inside the window
    auto wide = m_vulkan->createStage(m_deviceId, source, spec);
    auto plain = vulkanStage(*m, 0, config.nLayer);
    runtime::StageOutput got, want;
    const runtime::Segment segment[] = {{0, 0, int32_t(kPromptA.size()), LogitRows::Last}};
    wide->forward(runtime::Batch{kPromptA, {}, segment}, got);
    plain->forward(runtime::Batch{kPromptA, {}, segment}, want);
    QVERIFY(!want.logits.empty());
    QVERIFY(got.logits == want.logits);
  }

  // Mixture-of-experts layers, gemma's ops (Scale, GeGLU, soft-capping) have no Vulkan kernels yet:
  // the stage says so, by layer, before it uploads anything (the CPU backend runs such models).
  void opsWithoutKernelsAreRefusedByName() {
    for (const auto& [architecture, what] :
         {std::pair{"qwen3moe", "layer 0 has a mixture of experts"},
          std::pair{"gemma3", "layer 0 has a Scale op"},
          std::pair{"gemma2", "the model's head has final logit soft-capping"},
          std::pair{"phi3", "layer 0 has a fused Q/K/V projection"}}) {
      const auto m = loadModel(writeModel(architecture));
      QString refusal;
      try {
        vulkanStage(*m, 0, m->config.nLayer);
      } catch (const Error& e) {
        refusal = e.what();
      }
      QVERIFY2(refusal.contains(what), qPrintable(refusal));
    }
  }

  void validationLayerReportedNoErrors() { QCOMPARE(vulkan::validationErrorCount(), 0); }
};

QTEST_GUILESS_MAIN(VulkanLayerProgramTest)
#include "test_vulkan_layer_program.moc"
