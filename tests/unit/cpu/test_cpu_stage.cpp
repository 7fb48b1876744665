// CpuStage on a small synthetic model: the KV cache can be truncated and rewritten without a
// trace of what it held, results do not depend on the thread count, a decode step allocates
// nothing, and the tensor observer sees the layer program.

#include <QTemporaryDir>
#include <QtTest>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/synthetic_model.h"
#include "engine/runtime/stage.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_stage.h"

using namespace shoal;

// Counting allocations (this test binary replaces the global operator new).
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int> g_allocations{0};
}  // namespace

void* operator new(size_t size) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace {

struct Loaded {
  gguf::File file;
  model::ModelConfig config;
  model::ModelWeights weights;
  explicit Loaded(const std::string& path)
      : file(gguf::File::open(path)),
        config(model::ModelConfig::fromGguf(file)),
        weights(model::ModelWeights::bind(file, config)) {}
};

std::vector<float> forward(runtime::Stage& stage, int32_t first,
                           const std::vector<int32_t>& tokens) {
  runtime::StageInput in;
  in.firstPosition = first;
  in.count = static_cast<int32_t>(tokens.size());
  in.tokens = tokens;
  runtime::StageOutput out;
  stage.forward(in, out);
  return out.logits;
}

}  // namespace

class CpuStageTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::unique_ptr<Loaded> m_model;

  std::unique_ptr<runtime::Stage> makeStage(cpu::CpuBackend& backend) {
    runtime::StageSpec spec;
    spec.lastLayer = m_model->config.nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = 96;
    spec.maxBatch = 32;
    runtime::ModelSource src{&m_model->file, &m_model->config, &m_model->weights};
    return backend.createStage("cpu0", src, spec);
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    model::SyntheticModelSpec spec;
    spec.nLayer = 2;
    spec.nEmbd = 128;
    spec.nHead = 4;
    spec.nHeadKv = 2;  // head size 32: the f16 dots' scalar tail is used too
    spec.nFf = 256;
    spec.nVocab = 300;
    spec.tiedOutput = true;
    spec.weightType = gguf::TensorType::Q4_1;
    spec.embedType = gguf::TensorType::Q8_0;
    const std::string path = m_dir.filePath("tiny.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    m_model = std::make_unique<Loaded>(path);
  }

  void truncatedCacheLeavesNoTrace() {
    cpu::CpuBackend backend(2);
    const std::vector<int32_t> a = {5, 17, 230, 42, 99, 1, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const std::vector<int32_t> b = {3, 44, 200, 8};
    auto used = makeStage(backend);
    forward(*used, 0, a);
    used->truncate(0, 0);
    auto fresh = makeStage(backend);
    const auto got = forward(*used, 0, b);
    const auto want = forward(*fresh, 0, b);
    QVERIFY(cpu::test::firstBitDifference(got.data(), want.data(), want.size()) < 0);
    // And one more decode step on top of each.
    const auto got2 = forward(*used, 4, {77});
    const auto want2 = forward(*fresh, 4, {77});
    QVERIFY(cpu::test::firstBitDifference(got2.data(), want2.data(), want2.size()) < 0);
  }

  void resultsDoNotDependOnThreadCount() {
    cpu::CpuBackend one(1), two(2);
    auto s1 = makeStage(one);
    auto s2 = makeStage(two);
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 250, 251, 252};
    const auto a = forward(*s1, 0, prompt);
    const auto b = forward(*s2, 0, prompt);
    QVERIFY(cpu::test::firstBitDifference(a.data(), b.data(), a.size()) < 0);
    const auto c = forward(*s1, 10, {9});
    const auto d = forward(*s2, 10, {9});
    QVERIFY(cpu::test::firstBitDifference(c.data(), d.data(), c.size()) < 0);
  }

  void decodeStepAllocatesNothing() {
    cpu::CpuBackend backend(2);
    auto stage = makeStage(backend);
    runtime::StageInput in;
    runtime::StageOutput out;
    const std::vector<int32_t> prompt = {4, 5, 6, 7};
    in.count = 4;
    in.tokens = prompt;
    stage->forward(in, out);
    int32_t token = 9;
    in.count = 1;
    in.tokens = std::span(&token, 1);
    in.firstPosition = 4;
    stage->forward(in, out);  // the first decode step sizes the output
    g_allocations = 0;
    g_counting = true;
    for (int32_t pos = 5; pos < 8; ++pos) {
      in.firstPosition = pos;
      stage->forward(in, out);
    }
    g_counting = false;
    QCOMPARE(g_allocations.load(), 0);
  }

  void observerSeesTheLayerProgram() {
    cpu::CpuBackend backend(2);
    auto stage = makeStage(backend);
    std::map<std::string, int> seen;
    int64_t logitsCols = 0;
    dynamic_cast<cpu::CpuStage&>(*stage).setTensorObserver(
        [&](std::string_view name, int32_t layer, const float*, int64_t rows, int64_t cols) {
          std::string key(name);
          if (layer >= 0) key.append("-").append(std::to_string(layer));
          seen[key]++;
          if (name == "result_output") logitsCols = cols * (rows == 1 ? 1 : 0);
        });
    forward(*stage, 0, {1, 2, 3});
    for (const char* name : {"attn_norm", "Qcur", "Kcur", "Vcur", "kqv_out", "attn_out", "ffn_inp",
                             "ffn_norm", "ffn_swiglu", "l_out"}) {
      for (int layer = 0; layer < 2; ++layer) {
        QCOMPARE(seen[std::string(name).append("-").append(std::to_string(layer))], 1);
      }
    }
    QCOMPARE(seen["result_norm"], 1);
    QCOMPARE(logitsCols, int64_t{300});
  }
};

QTEST_GUILESS_MAIN(CpuStageTest)
#include "test_cpu_stage.moc"
