// The Vulkan stage runs each architecture's layer program (engine/model/arch/) and the batch
// interface, on small synthetic models (no model file needed):
//  * llama, qwen2 (Q/K/V biases), qwen3 (per-head Q/K norms, NeoX RoPE) and phi3 (fused Q/K/V
//    and gate/up matrices read as row ranges, the Scale op; with LongRoPE's long factors too)
//    give the CPU backend's logits for a prompt and decode steps: bit for bit where the device
//    runs the exact-math kernels (Q8_0 weights pair with the integer kernels that round as the
//    CPU's), within the GPU tolerance below otherwise;
//  * gemma3 and gemma2 (GeGLU, sliding windows shorter than the context, soft-capped scores and
//    logits), qwen3moe and a Mixtral-style llama (mixtures of experts: router, top-k, expert
//    products) are within the GPU tolerance of the CPU: logits NMSE <= 5e-4 (with experts: in
//    all forwards but one, where a near-tied random router may pick another expert) and mean KL
//    <= 0.01 nats (top-1 agreement reported);
//  * a batch of two segments (two sequences) gives what two separate runs give, for a head stage
//    (logits rows in row order; the CPU backend's too, where the math is exact) and a stage
//    without the head (hidden rows);
//  * the Last logits row is the last row of All, and None returns no logits but caches the
//    positions; a greedy SampleRequest is answered on the device (argmax: a token per logits
//    row, 4 bytes read back each), another one gets logits;
//  * a stage holding only the head (no layer) picks the logits rows itself;
//  * a program that declares a KV cache bounded by its window (LayerProgram::window) is refused,
//    and a window as long as the context runs as full attention;
//  * a sliding-window layer's cache becomes a ring (engine/model/kv_ring.h) in a long context:
//    the device memory shrinks as the planner counts it, a prompt that wraps the ring (in
//    chunks) and decode steps after it stay within the tolerance of the CPU, and a rewind
//    beyond the ring's slack starts the sequence over;
//  * gpt-oss (attention sinks, expert biases, the clamped SwiGLU; Q8_0 or MXFP4 experts) is
//    within the same tolerance;
//  * the low-bit types of downloaded files (a Q3_K_M-style mix with Q2_K, Q4_K, Q5_K and Q6_K;
//    IQ4_XS, dense and as experts; Q5_1, Q5_0 and IQ4_NL) within the same tolerance;
//  * a weight type without Vulkan kernels (BF16) is refused by name;
//  * a decoded token's layer is at most 10 dispatches (llama's shape; the fused kernels), counted
//    from the recorded command buffer;
//  * a profiled decode step times every dispatch and reads each weight matrix exactly once;
//  * a stage's device memory is known before upload (to the byte) and refused with the shortfall
//    beyond the device's free memory.
// Under the validation layer, which must report no error. Skipped without a Vulkan device.
// Built twice: test_vulkan_layer_program runs the default (native) math, where every model is
// held to the GPU tolerance; test_vulkan_layer_program_exact (SHOAL_TEST_EXACT_MATH) the opt-in
// exact math, where the bit-for-bit cases above apply.

#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/architecture.h"
#include "engine/model/kv_ring.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/synthetic_model.h"
#include "engine/model/tokenizer.h"
#include "engine/model/vocab.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/scheduler.h"
#include "engine/runtime/session.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/vulkan/vk_loader.h"
#include "kernels/vulkan/vulkan_backend.h"
#include "kernels/vulkan/vulkan_stage.h"

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

// Normalized MSE of `got` against `want`: sum (got - want)^2 / sum want^2.
double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += double(want[i]) * want[i];
  }
  return ref > 0 ? err / ref : err;
}

// KL(p || q) in nats of the softmaxes of two logits rows.
double klDivergence(const std::vector<float>& p, const std::vector<float>& q) {
  auto logSoftmax = [](const std::vector<float>& x) {
    const double m = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (float v : x) sum += std::exp(double(v) - m);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - m - std::log(sum);
    return out;
  };
  const std::vector<double> lp = logSoftmax(p), lq = logSoftmax(q);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return kl;
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

  // A small model of an architecture, or of a variant: "phi3-longrope" (LongRoPE with an
  // original context shorter than the stage's: the long factors), "gemma2-softcap" (caps that
  // bend the scores and logits), "llama-moe" (Mixtral-style experts), "gpt-oss-mxfp4" (MXFP4
  // experts), "llama-q3_K_m", "qwen3-iq4_xs", "qwen3moe-iq4_xs", "llama-q5_1" (weight types),
  // "llama-bf16".
  // gemma2, gemma3 and gpt-oss slide over windows of 8 positions, which the prompt and decode
  // steps outgrow.
  std::filesystem::path writeModel(const std::string& variant) {
    std::string architecture = variant;
    for (const char* suffix :
         {"-longrope", "-softcap", "-moe", "-mxfp4", "-q3_K_m", "-iq4_xs", "-q5_1", "-bf16"}) {
      if (variant.ends_with(suffix))
        architecture = variant.substr(0, variant.size() - strlen(suffix));
    }
    model::SyntheticModelSpec spec;
    spec.architecture = architecture;
    spec.nLayer = 2;
    spec.nEmbd = 256;
    spec.nHead = 4;
    spec.nHeadKv = 2;
    spec.nFf = 512;
    spec.nVocab = 320;
    spec.tiedOutput = architecture == "qwen3";
    if (architecture == "gpt-oss") {  // experts, and the window its loader requires
      spec.nExpert = 4;
      spec.nExpertUsed = 2;
      spec.nFfExp = 256;
      spec.slidingWindow = 8;
    }
    if (architecture == "qwen3moe" || variant == "llama-moe") {
      spec.nExpert = 4;
      spec.nExpertUsed = 2;
    }
    if (variant == "phi3-longrope") {
      spec.longRope = true;
      spec.ropeOrigCtx = kContext / 2;
      spec.ropeAttnFactor = 1.19f;
    }
    if (architecture == "gemma3" || architecture == "gemma2") {
      spec.slidingWindow = 8;
      spec.slidingWindowPattern = 2;
      spec.tiedOutput = true;
    }
    if (variant == "gpt-oss-mxfp4") {
      for (const char* kind : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
        spec.typeOverrides[kind] = gguf::TensorType::MXFP4;
      }
    }
    if (variant == "llama-q3_K_m") {  // Q3_K_M's mix
      spec.weightType = gguf::TensorType::Q3_K;
      spec.typeOverrides["attn_v"] = gguf::TensorType::Q5_K;
      spec.typeOverrides["ffn_down"] = gguf::TensorType::Q4_K;
      spec.typeOverrides["output"] = gguf::TensorType::Q6_K;
      spec.typeOverrides["attn_q"] = gguf::TensorType::Q2_K;
    }
    // IQ4_XS experts, the rest Q8_0: with every matrix in a float-path type, the dense layers'
    // rounding differences can tip a near-tied router of these random models to another
    // expert for a token, which no product tolerance covers.
    if (variant == "qwen3moe-iq4_xs") {
      for (const char* kind : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
        spec.typeOverrides[kind] = gguf::TensorType::IQ4_XS;
      }
    }
    if (variant == "qwen3-iq4_xs") spec.weightType = gguf::TensorType::IQ4_XS;
    if (variant == "llama-q5_1") {
      spec.weightType = gguf::TensorType::Q5_1;
      spec.typeOverrides["ffn_down"] = gguf::TensorType::Q5_0;
      spec.typeOverrides["attn_v"] = gguf::TensorType::IQ4_NL;
    }
    if (variant == "llama-bf16") spec.weightType = gguf::TensorType::BF16;
    if (variant == "gemma2-softcap") {
      spec.attnLogitSoftcap = 0.2f;
      spec.finalLogitSoftcap = 1.0f;
    }
    spec.seed = 7;
    const std::filesystem::path path =
        m_dir.filePath(QString::fromStdString(variant) + ".gguf").toStdString();
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
#ifdef SHOAL_TEST_EXACT_MATH
    setenv("SHOAL_VULKAN_MATH", "exact", 1);
#else
    setenv("SHOAL_VULKAN_MATH", "native", 1);
#endif
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

  // exact: whether the exact-math kernels give the CPU's logits bit for bit (the models whose
  // ops are all rounded as the CPU's); the others (tanh, the experts' dequantizing products)
  // are held to the GPU tolerance: logits NMSE <= 5e-4 and mean KL <= 0.01 nats.
  void architectureMatchesCpu_data() {
    QTest::addColumn<QString>("architecture");
    QTest::addColumn<bool>("exact");
    for (const char* a : {"llama", "qwen2", "qwen3", "phi3", "phi3-longrope"}) {
      QTest::newRow(a) << QString(a) << true;
    }
    for (const char* a :
         {"gemma3", "gemma2", "gemma2-softcap", "qwen3moe", "llama-moe", "gpt-oss", "gpt-oss-mxfp4",
          "llama-q3_K_m", "qwen3moe-iq4_xs", "llama-q5_1", "qwen3-iq4_xs"}) {
      QTest::newRow(a) << QString(a) << false;
    }
  }
  void architectureMatchesCpu() {
    QFETCH(QString, architecture);
    QFETCH(bool, exact);
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
    const size_t vocab = size_t(m->config.nVocab);
    double worst = 0, worstNmse = 0, klSum = 0;
    bool identical = true;
    int sameToken = 0, rows = 0;
    std::vector<double> stepNmse;  // per forward: the prompt's rows, then each decode step
    // Every logits row: |diff|, NMSE, the same argmax, KL(CPU || Vulkan) of the softmaxes.
    auto compareRows = [&] {
      QCOMPARE(got.size(), want.size());
      worst = std::max(worst, maxAbsDiff(got, want));
      worstNmse = std::max(worstNmse, nmse(got, want));
      stepNmse.push_back(nmse(got, want));
      identical = identical && got == want;
      for (size_t r = 0; r + vocab <= want.size(); r += vocab) {
        const std::vector<float> w = slice(want, r, vocab), g = slice(got, r, vocab);
        sameToken += argmax(w) == argmax(g);
        klSum += klDivergence(w, g);
        ++rows;
      }
    };
    compareRows();
    int32_t position = static_cast<int32_t>(kPromptA.size());
    for (int step = 0; step < 8; ++step) {
      const int32_t token = argmax(slice(want, want.size() - vocab, vocab));
      cpuChain.forward(0, position, std::span(&token, 1), want);
      vkChain.forward(0, position, std::span(&token, 1), got);
      ++position;
      compareRows();
    }
    const double meanKl = klSum / rows;
    qInfo("%s: max |logit diff| %.3g, max NMSE %.3g, mean KL %.3g nats, top-1 equal %d/%d, %s",
          qPrintable(architecture), worst, worstNmse, meanKl, sameToken, rows,
          identical ? "bit-identical" : "not bit-identical");
    if (m_exact && exact) {
      QVERIFY2(identical, qPrintable(QString("max |diff| %1").arg(worst)));
    } else {
      // The GPU contract (NMSE and KL); top-1 agreement is reported, not asserted: the random
      // models' top-2 margins are often below the products' rounding differences. With experts,
      // one forward may be off: a near-tied router of these random models picks another expert
      // for a row under any rounding difference (measured: llama-moe's and gpt-oss's one such
      // step at NMSE 0.022 and 0.014, the others near 1e-4, while the expert products
      // themselves equal the CPU's to 1e-14: test_vulkan_ops expertProductsMatchTheCpu).
      const auto above =
          std::count_if(stepNmse.begin(), stepNmse.end(), [](double e) { return e > 5e-4; });
      if (m->config.nExpert == 0) {
        QVERIFY2(worstNmse <= 5e-4, qPrintable(QString("max NMSE %1").arg(worstNmse)));
      } else {
        QVERIFY2(above <= 1, qPrintable(QString("%1 forwards above NMSE 5e-4").arg(above)));
      }
      QVERIFY2(meanKl <= 0.01, qPrintable(QString("mean KL %1").arg(meanKl)));
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
    // A greedy request is sampled on the device: a token per logits row, the argmax of the rows
    // a run without the request gives, and 4 bytes read back per row instead of the logits.
    auto* device = dynamic_cast<vulkan::VulkanStage*>(batched.get());
    QVERIFY(device);
    const runtime::SampleRequest greedy;
    uint64_t readBefore = device->bytesReadBack();
    batched->forward(runtime::Batch{tokens, {}, both, &greedy}, out);
    QVERIFY(out.logits.empty());
    QCOMPARE(out.tokens.size(), kPromptA.size() + 1);
    for (size_t r = 0; r < out.tokens.size(); ++r) {
      QCOMPARE(out.tokens[r], argmax(slice(wantLogits, r * vocab, vocab)));
    }
    QCOMPARE(device->bytesReadBack() - readBefore, uint64_t(out.tokens.size()) * 4);
    batched->truncate(0, 0);
    batched->truncate(1, 0);
    readBefore = device->bytesReadBack();
    // B keeps one row of several: each segment its own pass.
    uint64_t passesBefore = device->passes();
    batched->forward(runtime::Batch{tokens, {}, both}, out);
    QCOMPARE(device->passes() - passesBefore, uint64_t{2});
    QVERIFY(out.tokens.empty());
    QCOMPARE(out.logits.size(), (kPromptA.size() + 1) * vocab);
    QCOMPARE(device->bytesReadBack() - readBefore, uint64_t(out.logits.size()) * 4);
    QVERIFY(out.logits == wantLogits);
    // The CPU backend runs the two segments as one batch; the rows are the same.
    auto cpuStage = m_cpu->createStage("cpu0", m->source(), specFor(m->config, 0, layers, 2));
    runtime::StageOutput cpuOut;
    cpuStage->forward(runtime::Batch{tokens, {}, both}, cpuOut);
    if (m_exact) QVERIFY(cpuOut.logits == out.logits);
    // A stage without the head passes every row on: both segments in one pass.
    auto* first = dynamic_cast<vulkan::VulkanStage*>(batchedFirst.get());
    QVERIFY(first);
    passesBefore = first->passes();
    batchedFirst->forward(runtime::Batch{tokens, {}, both}, out);
    QCOMPARE(first->passes() - passesBefore, uint64_t{1});
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
    runtime::SampleRequest warm;  // not greedy: the host samples, so logits come back
    warm.temperature = 0.7f;
    // The two decode rows run as one pass (each weight read once for both sequences), with the
    // very logits of the separate runs.
    passesBefore = device->passes();
    batched->forward(runtime::Batch{next, {}, steps, &warm}, out);
    QCOMPARE(device->passes() - passesBefore, uint64_t{1});
    QVERIFY(out.tokens.empty());
    QCOMPARE(out.logits.size(), 2 * vocab);
    QVERIFY(out.logits == wantLogits);
  }

  // A batch of two decode rows and a prompt (a request admitted while others decode): the decode
  // rows run as one pass, the prompt (one kept row of several) as another; the logits are those
  // of running the three segments one by one.
  void mixedBatchRunsItsDecodeRowsAsOnePass() {
    const auto m = loadModel(writeModel("llama"));
    const int32_t layers = m->config.nLayer;
    auto together = vulkanStage(*m, 0, layers, 3), apart = vulkanStage(*m, 0, layers, 3);
    auto* device = dynamic_cast<vulkan::VulkanStage*>(together.get());
    QVERIFY(device);
    runtime::StageOutput out;
    const runtime::Segment a{0, 0, int32_t(kPromptA.size()), LogitRows::Last};
    const runtime::Segment b{1, 0, int32_t(kPromptB.size()), LogitRows::Last};
    for (runtime::Stage* s : {together.get(), apart.get()}) {
      for (auto [segment, prompt] : {std::pair{a, &kPromptA}, std::pair{b, &kPromptB}}) {
        const runtime::Segment one[] = {segment};
        s->forward(runtime::Batch{*prompt, {}, one}, out);
      }
    }
    const runtime::Segment mixed[] = {{0, int32_t(kPromptA.size()), 1, LogitRows::Last},
                                      {1, int32_t(kPromptB.size()), 1, LogitRows::Last},
                                      {2, 0, int32_t(kPromptB.size()), LogitRows::Last}};
    std::vector<int32_t> tokens = {42, 43};
    tokens.insert(tokens.end(), kPromptB.begin(), kPromptB.end());
    std::vector<float> want;
    size_t row = 0;
    for (const runtime::Segment& s : mixed) {
      const runtime::Segment one[] = {s};
      apart->forward(runtime::Batch{std::span(tokens).subspan(row, size_t(s.count)), {}, one}, out);
      want.insert(want.end(), out.logits.begin(), out.logits.end());
      row += size_t(s.count);
    }
    const uint64_t before = device->passes();
    together->forward(runtime::Batch{tokens, {}, mixed}, out);
    QCOMPARE(device->passes() - before, uint64_t{2});
    QCOMPARE(out.logits.size(), want.size());
    QVERIFY(out.logits == want);
  }

  // The scheduler's sequences decoding together run as one pass per step on a Vulkan stage, and
  // each greedy reply equals its solo run token for token (a pass's decode rows round as the
  // rows of separate passes).
  void concurrentRepliesShareAPassAndEqualTheirSoloRuns() {
    const auto m = loadModel(writeModel("llama"));
    const auto tokenizer = model::Tokenizer::create(model::Vocab::fromGguf(m->file));
    const int32_t layers = m->config.nLayer;
    const std::vector<std::vector<int32_t>> prompts = {
        kPromptA, kPromptB, {5, 6, 7}, {40, 41, 42, 43, 44}};
    runtime::GenerateOptions o;
    o.maxTokens = 12;
    o.sampler.temperature = 0;
    o.ignoreEndOfGeneration = true;
    std::vector<std::vector<int32_t>> want;
    for (const auto& p : prompts) {
      std::vector<std::unique_ptr<runtime::Stage>> stages;
      stages.push_back(vulkanStage(*m, 0, layers));
      runtime::Chain chain(std::move(stages));
      runtime::Session session(chain, *tokenizer);
      want.push_back(session.generate(p, o).tokens);
    }
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(vulkanStage(*m, 0, layers, int32_t(prompts.size())));
    auto* device = dynamic_cast<vulkan::VulkanStage*>(stages.front().get());
    QVERIFY(device);
    runtime::Chain chain(std::move(stages));
    runtime::Scheduler sched(chain, *tokenizer);
    std::vector<std::vector<int32_t>> got(prompts.size());
    std::vector<std::string> errors(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      runtime::Scheduler::Request r;
      r.prompt = prompts[i];
      r.options = o;
      r.onFinish = [&got, &errors, i](const runtime::GenerateResult& result,
                                      std::string_view error) {
        got[i] = result.tokens;
        errors[i] = std::string(error);
      };
      sched.add(std::move(r));
    }
    sched.runUntilIdle();
    for (size_t i = 0; i < prompts.size(); ++i) {
      QVERIFY2(errors[i].empty(), errors[i].c_str());
      QCOMPARE(got[i], want[i]);
    }
    // A pass per prompt, then one per step for all four (not one per sequence and step: 48).
    QVERIFY2(device->passes() <= 4 + 12 + 2, qPrintable(QString::number(device->passes())));
  }

  // A decoded token's layer is at most 10 dispatches in the default math (issue: fusion and
  // barriers), counted from the recorded command buffer: RMSNorm, Q/K/V in one mat-vec, RoPE of
  // Q and K with the cache store, split attention and its merge (a context long enough for
  // several splits), Wo with the residual add, RMSNorm, gate/up with SwiGLU, down with the
  // residual add. The stage's own dispatches are the embedding and the head's norm, product and
  // argmax. Reported for the other dense architectures, asserted for llama's shape.
  void decodedTokenLayerIsAtMostTenDispatches_data() {
    QTest::addColumn<QString>("architecture");
    QTest::addColumn<int>("most");
    for (const char* a : {"llama", "qwen2", "qwen3", "phi3"}) QTest::newRow(a) << QString(a) << 10;
    for (const char* a : {"gemma3", "qwen3moe", "gpt-oss"}) {
      QTest::newRow((std::string(a) + " (reported)").c_str()) << QString(a) << 0;
    }
  }
  void decodedTokenLayerIsAtMostTenDispatches() {
    if (m_exact) QSKIP("exact math runs the ops one by one");
    QFETCH(QString, architecture);
    QFETCH(int, most);
    const auto m = loadModel(writeModel(architecture.toStdString()));
    const int32_t layers = m->config.nLayer;
    runtime::StageSpec spec = specFor(m->config, 0, layers);
    spec.contextLength = 4096;  // split attention uses several splits and a merge
    auto stage = m_vulkan->createStage(m_deviceId, m->source(), spec);
    auto* device = dynamic_cast<vulkan::VulkanStage*>(stage.get());
    QVERIFY(device);
    runtime::StageOutput out;
    const runtime::Segment prompt[] = {{0, 0, int32_t(kPromptA.size()), LogitRows::Last}};
    stage->forward(runtime::Batch{kPromptA, {}, prompt}, out);
    const int32_t token = 42;
    const runtime::Segment step[] = {{0, int32_t(kPromptA.size()), 1, LogitRows::Last}};
    const runtime::SampleRequest greedy;
    stage->forward(runtime::Batch{std::span(&token, 1), {}, step, &greedy}, out);
    QCOMPARE(out.tokens.size(), size_t(1));
    const uint32_t stageOwn = 4;  // embed; output norm, output product, argmax
    const uint32_t total = device->lastDispatches();
    QVERIFY(total > stageOwn);
    const double perLayer = double(total - stageOwn) / layers;
    qInfo("%s: %u dispatches for a decoded token, %.1f per layer", qPrintable(architecture), total,
          perLayer);
    if (most > 0) QVERIFY2(perLayer <= most, qPrintable(QString("%1 per layer").arg(perLayer)));
  }

  // Profiling a decode step: every dispatch of the pass is timed and named (the profile's
  // dispatches add up to the pass's), and the products read each weight matrix exactly once: the
  // weight bytes the kernels read are the stage's decodeWeightBytes (the embedding's one row, the
  // layers' and the head's matrices).
  void profileTimesEveryDispatchAndReadsEachWeightOnce() {
    const auto m = loadModel(writeModel("llama"));
    auto stage = vulkanStage(*m, 0, m->config.nLayer);
    auto* device = dynamic_cast<vulkan::VulkanStage*>(stage.get());
    QVERIFY(device);
    if (!stage->setProfiling(true)) QSKIP("the device has no timestamps");
    runtime::StageOutput out;
    const runtime::Segment prompt[] = {{0, 0, int32_t(kPromptA.size()), LogitRows::Last}};
    stage->forward(runtime::Batch{kPromptA, {}, prompt}, out);
    QVERIFY(stage->setProfiling(true));  // cleared: only the decode step below
    const int32_t token = 42;
    const runtime::Segment step[] = {{0, int32_t(kPromptA.size()), 1, LogitRows::Last}};
    stage->forward(runtime::Batch{std::span(&token, 1), {}, step}, out);
    uint64_t dispatches = 0, weightBytes = 0;
    double seconds = 0;
    for (const runtime::KernelProfile& k : stage->profile()) {
      QVERIFY2(k.seconds >= 0, k.kernel.c_str());
      dispatches += k.dispatches;
      weightBytes += k.weightBytes;
      seconds += k.seconds;
    }
    qInfo("%llu dispatches, %.3g ms on the device, %llu weight bytes read",
          (unsigned long long)dispatches, seconds * 1e3, (unsigned long long)weightBytes);
    QCOMPARE(dispatches, uint64_t(device->lastDispatches()));
    QVERIFY(seconds > 0);
    QCOMPARE(weightBytes, stage->decodeWeightBytes());
    QVERIFY(!stage->setProfiling(false));
    QVERIFY(stage->profile().empty());
  }

  // The stage's device memory is known before anything is uploaded: deviceBytes is what the pool
  // then holds on the device, to the byte (weights, KV cache, activations, RoPE tables, scratch,
  // expert scratch); a device with less free memory (here a memory limit) refuses the stage
  // with the shortfall, and a stage's memory counts against what the device has free.
  void deviceMemoryIsKnownAndBounded_data() {
    QTest::addColumn<QString>("architecture");
    for (const char* a : {"llama", "gemma3", "qwen3moe", "phi3-longrope", "gpt-oss"}) {
      QTest::newRow(a) << QString(a);
    }
  }
  void deviceMemoryIsKnownAndBounded() {
    QFETCH(QString, architecture);
    const auto m = loadModel(writeModel(architecture.toStdString()));
    const runtime::StageSpec spec = specFor(m->config, 0, m->config.nLayer, 2);
    const uint64_t need = vulkan::VulkanStage::deviceBytes(m->source(), spec);
    QCOMPARE(m_vulkan->stageDeviceBytes(m->source(), spec), need);
    {
      auto stage = m_vulkan->createStage(m_deviceId, m->source(), spec);
      auto* device = dynamic_cast<vulkan::VulkanStage*>(stage.get());
      QVERIFY(device);
      QCOMPARE(device->deviceBytesAllocated(), need);
    }
    vulkan::VulkanBackend limited(2 * need);
    QVERIFY(limited.freeDeviceBytes(m_deviceId) <= 2 * need);
    auto first = limited.createStage(m_deviceId, m->source(), spec);
    QVERIFY(limited.freeDeviceBytes(m_deviceId) <= need);
    const runtime::StageSpec body = specFor(m->config, 0, m->config.nLayer - 1, 2);
    const uint64_t bodyNeed = vulkan::VulkanStage::deviceBytes(m->source(), body);
    QVERIFY(bodyNeed < need);
    auto second = limited.createStage(m_deviceId, m->source(), spec);  // exactly the rest
    QCOMPARE(limited.freeDeviceBytes(m_deviceId), uint64_t(0));
    try {
      auto third = limited.createStage(m_deviceId, m->source(), body);
      QFAIL("a stage beyond the memory limit was built");
    } catch (const Error& e) {
      const QString what = QString::fromUtf8(e.what());
      qInfo("%s", e.what());
      QVERIFY2(what.contains("0.0 MiB free (short by ") && what.contains("--gpu-layers"),
               qPrintable(what));
    }
  }

  // A top-k SampleRequest is answered with a token drawn among the device's top k: the token the
  // CPU sampler draws from the whole row of logits with the same parameters and seed, for many
  // seeds and parameter sets, with k * 8 bytes read back per row instead of the vocabulary.
  void topKSamplingDrawsAsTheHostSampler() {
    const auto m = loadModel(writeModel("llama"));
    auto stage = vulkanStage(*m, 0, m->config.nLayer);
    auto* device = dynamic_cast<vulkan::VulkanStage*>(stage.get());
    QVERIFY(device);
    runtime::StageOutput out;
    const runtime::Segment prompt[] = {{0, 0, int32_t(kPromptA.size()), LogitRows::Last}};
    stage->forward(runtime::Batch{kPromptA, {}, prompt}, out);
    const std::vector<float> logits = out.logits;
    QCOMPARE(logits.size(), size_t(m->config.nVocab));
    struct Params {
      float temperature, topP, minP;
      int32_t topK;
    };
    const Params sets[] = {{0.8f, 0.95f, 0.05f, 40},
                           {1.5f, 1.0f, 0.0f, 64},
                           {0.3f, 0.5f, 0.0f, 7},
                           {1.0f, 1.0f, 0.0f, 1}};
    int draws = 0, distinct = 0;
    for (const Params& ps : sets) {
      std::set<int32_t> seen;
      for (uint64_t seed = 1; seed <= 12; ++seed) {
        runtime::SampleRequest request;
        request.temperature = ps.temperature;
        request.topP = ps.topP;
        request.minP = ps.minP;
        request.topK = ps.topK;
        request.seed = seed;
        stage->truncate(0, int32_t(kPromptA.size()) - 1);
        const uint64_t readBefore = device->bytesReadBack();
        const runtime::Segment last[] = {{0, int32_t(kPromptA.size()) - 1, 1, LogitRows::Last}};
        stage->forward(runtime::Batch{std::span(&kPromptA.back(), 1), {}, last, &request}, out);
        QVERIFY(out.logits.empty());
        QCOMPARE(out.tokens.size(), size_t(1));
        QCOMPARE(device->bytesReadBack() - readBefore, uint64_t(ps.topK == 1 ? 4 : ps.topK * 8));
        // The host's draw over the whole row (the decode step's logits equal the prompt run's
        // last row: the same position, the block mat-vec rounds as the prefill kernel).
        runtime::SamplerParams sp;
        sp.temperature = ps.temperature;
        sp.topP = ps.topP;
        sp.minP = ps.minP;
        sp.topK = ps.topK;
        sp.repeatPenalty = 1.0f;
        sp.seed = seed;
        runtime::Sampler host(sp);
        QCOMPARE(out.tokens[0], host.sample(logits));
        seen.insert(out.tokens[0]);
        ++draws;
      }
      distinct += int(seen.size());
    }
    qInfo("%d draws, %d distinct tokens over the parameter sets", draws, distinct);
    QVERIFY(distinct > 8);  // the draws are not all the same token
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

  // A weight type without Vulkan kernels (BF16) is refused by tensor name and type before the
  // stage uploads anything (the CPU backend runs such models).
  void typesWithoutKernelsAreRefusedByName() {
    const auto m = loadModel(writeModel("llama-bf16"));
    QString refusal;
    try {
      vulkanStage(*m, 0, m->config.nLayer);
    } catch (const Error& e) {
      refusal = e.what();
    }
    QVERIFY2(refusal.contains("has type bf16, which has no Vulkan kernel"), qPrintable(refusal));
  }

  // A 32k-position context on a small llama (one layer, two query heads over one KV head): the
  // Vulkan stage accepts it (split attention has no shared-memory bound; every pass splits the
  // positions 16 ways and merges them), a prompt of 8k tokens goes in micro-batches, and the
  // last prompt row and decode steps after it give the CPU's logits within the GPU tolerance.
  // (lavapipe runs attention at well under 1 GMAC/s, so the prompt stops at a quarter of the
  // context; test_vulkan_ops checks the kernels at positions up to 32767.) In exact math the
  // stage refuses the context with its reason.
  void longContextMatchesCpu() {
    constexpr int32_t kLong = 32768, kPrompt = 8192 - 8, kBatch = 512, kSteps = 8;
    model::SyntheticModelSpec spec;
    spec.nLayer = 1;
    spec.nEmbd = 64;
    spec.nHead = 2;
    spec.nHeadKv = 1;
    spec.nFf = 128;
    spec.nVocab = 320;
    spec.nCtx = kLong;
    spec.weightStd = 0.08f;  // scores that prefer some positions over others
    spec.seed = 11;
    const std::filesystem::path path = m_dir.filePath("llama-32k.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    const auto m = loadModel(path);
    runtime::StageSpec stageSpec = specFor(m->config, 0, 1);
    stageSpec.contextLength = kLong;
    stageSpec.maxBatch = kBatch;
    if (m_exact) {
      QVERIFY_THROWS_EXCEPTION(Error, m_vulkan->createStage(m_deviceId, m->source(), stageSpec));
      QSKIP("exact math: the whole-context attention kernel refuses 32k positions (checked)");
    }
    std::vector<std::unique_ptr<runtime::Stage>> cpuStages, vkStages;
    cpuStages.push_back(m_cpu->createStage("cpu0", m->source(), stageSpec));
    vkStages.push_back(m_vulkan->createStage(m_deviceId, m->source(), stageSpec));
    runtime::Chain cpuChain(std::move(cpuStages)), vkChain(std::move(vkStages));

    std::vector<int32_t> prompt(static_cast<size_t>(kPrompt));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(3 + (i * 7919 + i / 97) % 317);
    const size_t vocab = size_t(m->config.nVocab);
    std::vector<float> want, got;
    QElapsedTimer timer;
    timer.start();
    cpuChain.forward(0, 0, prompt, want);
    const qint64 cpuMs = timer.restart();
    vkChain.forward(0, 0, prompt, got);
    qInfo("prompt of %zu tokens: CPU %lld ms, Vulkan %lld ms", prompt.size(), cpuMs,
          timer.elapsed());
    double worstNmse = nmse(got, want), klSum = klDivergence(want, got);
    int rows = 1;
    for (int32_t pos = kPrompt; pos < kPrompt + kSteps; ++pos) {
      const int32_t token = argmax(want);
      cpuChain.forward(0, pos, std::span(&token, 1), want);
      vkChain.forward(0, pos, std::span(&token, 1), got);
      QCOMPARE(got.size(), vocab);
      worstNmse = std::max(worstNmse, nmse(got, want));
      klSum += klDivergence(want, got);
      ++rows;
    }
    qInfo("32k context, %d positions: max logits NMSE %.3g, mean KL %.3g nats over %d rows",
          kPrompt + kSteps, worstNmse, klSum / rows, rows);
    QVERIFY2(worstNmse <= 5e-4, qPrintable(QString("max NMSE %1").arg(worstNmse)));
    QVERIFY2(klSum / rows <= 0.01, qPrintable(QString("mean KL %1").arg(klSum / rows)));
  }

  void slidingWindowRingMatchesCpu() {
    constexpr int32_t kLong = 2048, kPrompt = 1100, kBatch = 300, kSteps = 6;
    const auto m = loadModel(writeModel("gemma3"));  // layer 0 slides over 8 positions
    runtime::StageSpec stageSpec = specFor(m->config, 0, m->config.nLayer);
    stageSpec.contextLength = kLong;
    stageSpec.maxBatch = kBatch;
    if (m_exact) QSKIP("exact math: the whole-context attention kernel is checked elsewhere");
    // The ring layer's cache does not grow with the context (the global layer's does), and the
    // stage allocates what deviceBytes says.
    runtime::StageSpec twice = stageSpec;
    twice.contextLength = 2 * kLong;
    const uint64_t need = vulkan::VulkanStage::deviceBytes(m->source(), stageSpec);
    const uint64_t globalKvGrowth = 2 * 2 * uint64_t(m->config.kvDim()) * kLong;
    const uint64_t ropeGrowth = vulkan::VulkanStage::deviceBytes(m->source(), twice) - need;
    QVERIFY2(
        ropeGrowth >= globalKvGrowth && ropeGrowth < 2 * globalKvGrowth,
        qPrintable(QString("grew by %1 for %2 of global KV").arg(ropeGrowth).arg(globalKvGrowth)));
    std::vector<std::unique_ptr<runtime::Stage>> cpuStages, vkStages;
    cpuStages.push_back(m_cpu->createStage("cpu0", m->source(), stageSpec));
    vkStages.push_back(m_vulkan->createStage(m_deviceId, m->source(), stageSpec));
    QCOMPARE(dynamic_cast<vulkan::VulkanStage&>(*vkStages.back()).deviceBytesAllocated(), need);
    runtime::Chain cpuChain(std::move(cpuStages)), vkChain(std::move(vkStages));
    std::vector<int32_t> prompt(static_cast<size_t>(kPrompt));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(3 + (i * 7919 + i / 97) % 317);
    std::vector<float> want, got;
    double worstNmse = 0, klSum = 0;
    int rows = 0;
    for (int32_t at = 0; at < kPrompt; at += kBatch) {
      const auto part =
          std::span(prompt).subspan(size_t(at), size_t(std::min(kBatch, kPrompt - at)));
      cpuChain.forward(0, at, part, want);
      vkChain.forward(0, at, part, got);
    }
    for (int32_t pos = kPrompt; pos <= kPrompt + kSteps; ++pos) {
      QCOMPARE(got.size(), want.size());
      worstNmse = std::max(worstNmse, nmse(got, want));
      klSum += klDivergence(want, got);
      ++rows;
      if (pos == kPrompt + kSteps) break;
      const int32_t token = argmax(want);
      cpuChain.forward(0, pos, std::span(&token, 1), want);
      vkChain.forward(0, pos, std::span(&token, 1), got);
    }
    qInfo("gemma3, window 8 in a ring of %d, %d positions: max logits NMSE %.3g, mean KL %.3g",
          model::kvRingPositions(8), kPrompt + kSteps, worstNmse, klSum / rows);
    QVERIFY2(worstNmse <= 5e-4, qPrintable(QString("max NMSE %1").arg(worstNmse)));
    QVERIFY2(klSum / rows <= 0.01, qPrintable(QString("mean KL %1").arg(klSum / rows)));
    // Within the ring's slack the positions stay; beyond it the sequence starts over.
    QCOMPARE(vkChain.truncate(0, kPrompt - 100), kPrompt - 100);
    QCOMPARE(vkChain.truncate(0, 100), 0);
  }

  void validationLayerReportedNoErrors() { QCOMPARE(vulkan::validationErrorCount(), 0); }
};

QTEST_GUILESS_MAIN(VulkanLayerProgramTest)
#include "test_vulkan_layer_program.moc"
