// An architecture that differs from llama only by data runs on the CPU backend without code of
// its own: qwen3 (engine/model/arch/qwen3.cpp) adds an RMSNorm over each head of the queries and
// the keys (HeadNorm, weights attn_q_norm / attn_k_norm) and turns pairs (i, i + n/2) (NeoX
// RoPE). On synthetic qwen3 models:
//  * the queries and keys the attention sees are the projections, head-normed with their
//    weights, then rotated NeoX-style by each row's position (a double-precision reference from
//    the layer's input, taken through the tensor observer);
//  * as HeadNorm promises, scaling Wq and Wk changes the logits only by rounding, while the
//    same scaling of a llama model (no head norm) changes them grossly.

#include <QtTest>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/synthetic_model.h"
#include "engine/runtime/stage.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_stage.h"
#include "loaded_model.h"

using namespace shoal;
using model::TensorRole;

namespace {

using cpu::test::Loaded;

std::unique_ptr<runtime::Stage> wholeModelStage(const Loaded& m, cpu::CpuBackend& backend) {
  runtime::StageSpec spec;
  spec.lastLayer = m.config.nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength = 32;
  const runtime::ModelSource src{&m.file, &m.config, &m.weights};
  return backend.createStage("cpu0", src, spec);
}

// Logits of every row of `tokens` from position 0.
std::vector<float> allLogits(const Loaded& m, const std::vector<int32_t>& tokens) {
  cpu::CpuBackend backend(2);
  auto stage = wholeModelStage(m, backend);
  const runtime::Segment segment{0, 0, static_cast<int32_t>(tokens.size()),
                                 runtime::LogitRows::All};
  runtime::Batch batch;
  batch.tokens = tokens;
  batch.segments = std::span(&segment, 1);
  runtime::StageOutput out;
  stage->forward(batch, out);
  return out.logits;
}

// A copy of `in` whose attn_q and attn_k matrices (F32) are multiplied by `factor`.
void writeWithScaledQueriesAndKeys(const gguf::File& in, const std::filesystem::path& out,
                                   float factor) {
  gguf::Writer w;
  for (const auto& kv : in.metadata()) w.set(kv.key, kv.value);
  for (const auto& t : in.tensors()) {
    std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
    const bool scaled = t.name.ends_with(".attn_q.weight") || t.name.ends_with(".attn_k.weight");
    if (scaled) {
      QVERIFY(t.type == gguf::TensorType::F32);
      auto* v = reinterpret_cast<float*>(bytes.data());
      for (size_t i = 0; i < bytes.size() / sizeof(float); ++i) v[i] *= factor;
    }
    w.addTensor(t.name, t.type, t.dims, std::move(bytes));
  }
  w.write(out);
}

double normalizedMse(const std::vector<float>& got, const std::vector<double>& ref) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return err / norm;
}

double normalizedMse(const std::vector<float>& got, const std::vector<float>& ref) {
  return normalizedMse(got, std::vector<double>(ref.begin(), ref.end()));
}

enum class Pairs { Neox, Adjacent };

// Rows of W · x (W: F32, `outputs` rows of x.size()), in double, then per head of headDim:
// rmsnorm times `headWeight` when given, then RoPE at `position` in the given pairing.
std::vector<double> referenceHeads(const float* w, int64_t outputs, const float* x, int64_t n,
                                   int32_t headDim, const float* headWeight, float eps,
                                   int32_t position, float base, Pairs pairs) {
  std::vector<double> y(static_cast<size_t>(outputs));
  for (int64_t r = 0; r < outputs; ++r) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(w[r * n + i]) * x[i];
    y[static_cast<size_t>(r)] = s;
  }
  const int32_t half = headDim / 2;
  for (int64_t h = 0; h < outputs / headDim; ++h) {
    double* v = &y[static_cast<size_t>(h * headDim)];
    if (headWeight) {
      double sq = 0;
      for (int32_t i = 0; i < headDim; ++i) sq += v[i] * v[i];
      const double scale = 1.0 / std::sqrt(sq / headDim + eps);
      for (int32_t i = 0; i < headDim; ++i) v[i] *= scale * headWeight[i];
    }
    for (int32_t i = 0; i < half; ++i) {
      const double angle = position * std::pow(static_cast<double>(base), -2.0 * i / headDim);
      const int32_t a = pairs == Pairs::Neox ? i : 2 * i;
      const int32_t b = pairs == Pairs::Neox ? i + half : 2 * i + 1;
      const double x0 = v[a], x1 = v[b];
      v[a] = x0 * std::cos(angle) - x1 * std::sin(angle);
      v[b] = x0 * std::sin(angle) + x1 * std::cos(angle);
    }
  }
  return y;
}

}  // namespace

class CpuQwen3Test : public QObject {
  Q_OBJECT

  std::filesystem::path m_dir;

  model::SyntheticModelSpec spec(const std::string& architecture) const {
    model::SyntheticModelSpec s;
    s.architecture = architecture;
    s.nLayer = 2;
    s.nEmbd = 128;
    s.nHead = 4;
    s.nHeadKv = 2;  // head size 32
    s.nFf = 256;
    s.nVocab = 300;
    // F32 everywhere: scaling Wq and Wk by 4 is exact, and no activation is quantized (an 8-bit
    // rounding step would magnify the tiny change eps leaves).
    s.weightType = s.embedType = gguf::TensorType::F32;
    s.ropeFreqBase = 1000.f;
    s.seed = 11;
    return s;
  }

 private slots:
  void initTestCase() {
    m_dir = std::filesystem::temp_directory_path() /
            ("shoal-cpu-qwen3-" + std::to_string(QCoreApplication::applicationPid()));
    std::filesystem::create_directories(m_dir);
  }
  void cleanupTestCase() { std::filesystem::remove_all(m_dir); }

  void queriesAndKeysAreHeadNormedThenRotated() {
    const auto path = m_dir / "qwen3.gguf";
    model::writeSyntheticModel(spec("qwen3"), path);
    const Loaded m(path);
    QCOMPARE(m.config.architecture, std::string("qwen3"));
    cpu::CpuBackend backend(2);
    auto stage = wholeModelStage(m, backend);
    std::map<std::string, std::vector<float>> seen;  // layer 0's tensors
    dynamic_cast<cpu::CpuStage&>(*stage).setTensorObserver(
        [&](std::string_view name, int32_t layer, const float* data, int64_t rows, int64_t cols) {
          if (layer == 0) seen[std::string(name)].assign(data, data + rows * cols);
        });
    const std::vector<int32_t> tokens = {5, 17, 230, 42};
    const runtime::Segment segment{0, 0, 4, runtime::LogitRows::Last};
    runtime::Batch batch;
    batch.tokens = tokens;
    batch.segments = std::span(&segment, 1);
    runtime::StageOutput out;
    stage->forward(batch, out);

    const model::ModelConfig& c = m.config;
    const model::LayerWeights& lw = m.weights.layers[0];
    auto f32 = [](model::Tensor t) { return reinterpret_cast<const float*>(t->data); };
    const std::vector<float>& norm = seen["attn_norm"];
    QCOMPARE(norm.size(), tokens.size() * static_cast<size_t>(c.nEmbd));
    struct Case {
      const char* name;
      TensorRole w, headNorm;
      int64_t outputs;
    };
    for (const Case& k : {Case{"Qcur", TensorRole::Wq, TensorRole::QNorm, c.qDim()},
                          Case{"Kcur", TensorRole::Wk, TensorRole::KNorm, c.kvDim()}}) {
      std::vector<double> want, unnormed, adjacent;
      for (int32_t t = 0; t < static_cast<int32_t>(tokens.size()); ++t) {
        const float* x = &norm[static_cast<size_t>(t * c.nEmbd)];
        auto add = [&](std::vector<double>& all, const float* headWeight, Pairs pairs) {
          const auto rows = referenceHeads(f32(lw[k.w]), k.outputs, x, c.nEmbd, c.headDim,
                                           headWeight, c.rmsEps, t, 1000.f, pairs);
          all.insert(all.end(), rows.begin(), rows.end());
        };
        add(want, f32(lw[k.headNorm]), Pairs::Neox);
        add(unnormed, nullptr, Pairs::Neox);
        add(adjacent, f32(lw[k.headNorm]), Pairs::Adjacent);
      }
      const std::vector<float>& got = seen[k.name];
      QCOMPARE(got.size(), want.size());
      const double nmse = normalizedMse(got, want);
      qInfo("%s: normalized MSE %.3g against the head-normed, NeoX-rotated reference", k.name,
            nmse);
      QVERIFY2(nmse < 1e-10, qPrintable(QString("%1: nmse %2").arg(k.name).arg(nmse)));
      // The reference is discriminating: skipping the head norm or pairing adjacent dimensions
      // would be far off.
      QVERIFY(normalizedMse(got, unnormed) > 0.1);
      QVERIFY(normalizedMse(got, adjacent) > 0.01);
    }
  }

  void scalingQueriesAndKeysChangesNoLogit() {
    const std::vector<int32_t> tokens = {1, 17, 299, 42, 99, 5, 250, 3};
    auto relativeChange = [&](const std::string& architecture) {
      const auto path = m_dir / (architecture + "-base.gguf");
      const auto scaledPath = m_dir / (architecture + "-scaled.gguf");
      model::writeSyntheticModel(spec(architecture), path);
      writeWithScaledQueriesAndKeys(gguf::File::open(path), scaledPath, 4.0f);
      const auto base = allLogits(Loaded(path), tokens);
      const auto scaled = allLogits(Loaded(scaledPath), tokens);
      const double nmse = normalizedMse(scaled, base);
      qInfo("%s: Wq, Wk x4 changes the logits by a normalized MSE of %.3g", architecture.c_str(),
            nmse);
      return nmse;
    };
    // After the head norm only eps (1e-5 against mean squares of ~0.05) tells the scaled heads
    // apart, magnified a little by the f16 roundings of queries, keys and probabilities:
    // measured ~1.4e-7 for qwen3, against ~0.14 for llama.
    QVERIFY(relativeChange("qwen3") < 1e-5);
    QVERIFY(relativeChange("llama") > 1e-2);
  }
};

QTEST_GUILESS_MAIN(CpuQwen3Test)
#include "test_cpu_qwen3.moc"
