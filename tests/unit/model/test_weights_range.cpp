// ModelWeights::bindRange: a GGUF holding only one stage's tensors (a weight shard, as the LAN
// layer caches them) binds for that stage, and a stage built from it computes exactly what the
// same stage built from the whole model computes.

#include <QtTest>
#include <filesystem>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/synthetic_model.h"
#include "kernels/cpu/cpu_backend.h"

using namespace shoal;

namespace {

// A copy of `in` with every metadata key and only the tensors `keep` accepts.
template <typename Keep>
void writeSubset(const gguf::File& in, const std::filesystem::path& out, Keep keep) {
  gguf::Writer w;
  for (const auto& kv : in.metadata()) w.set(kv.key, kv.value);
  for (const auto& t : in.tensors()) {
    if (keep(t.name)) w.addTensor(t.name, t.type, t.dims, {t.data, t.data + t.nbytes});
  }
  w.write(out);
}

bool isLayer(const std::string& name, int layer) {
  return name.rfind("blk." + std::to_string(layer) + ".", 0) == 0;
}

// Hidden states of layers [1, 3) for a fixed input, from a stage over `path`.
std::vector<float> middleStageHidden(const std::filesystem::path& path, bool ranged) {
  const auto file = gguf::File::open(path);
  const auto config = model::ModelConfig::fromGguf(file);
  const auto weights = ranged ? model::ModelWeights::bindRange(file, config, 1, 3, false, false)
                              : model::ModelWeights::bind(file, config);
  cpu::CpuBackend cpu(1);
  runtime::StageSpec spec;
  spec.firstLayer = 1;
  spec.lastLayer = 3;
  spec.contextLength = 16;
  const runtime::ModelSource src{&file, &config, &weights};
  auto stage = cpu.createStage("cpu0", src, spec);
  std::vector<float> in(static_cast<size_t>(3 * config.nEmbd));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 37) % 101) / 101.f - 0.5f;
  const runtime::Segment segment{0, 0, 3, runtime::LogitRows::None};
  runtime::Batch batch;
  batch.hidden = in;
  batch.segments = std::span(&segment, 1);
  runtime::StageOutput out;
  stage->forward(batch, out);
  return out.hidden;
}

}  // namespace

class TestWeightsRange : public QObject {
  Q_OBJECT

  std::filesystem::path m_dir;
  std::filesystem::path m_full;

 private slots:
  void initTestCase() {
    m_dir = std::filesystem::temp_directory_path() /
            ("shoal-weights-range-" + std::to_string(QCoreApplication::applicationPid()));
    std::filesystem::create_directories(m_dir);
    model::SyntheticModelSpec spec;
    spec.nLayer = 4;
    spec.nEmbd = 64;
    spec.nHead = 2;
    spec.nHeadKv = 2;
    spec.nFf = 128;
    spec.nVocab = 300;
    m_full = m_dir / "full.gguf";
    model::writeSyntheticModel(spec, m_full);
  }
  void cleanupTestCase() { std::filesystem::remove_all(m_dir); }

  void middleShardBindsOnlyItsLayers() {
    const auto shard = m_dir / "middle.gguf";
    writeSubset(gguf::File::open(m_full), shard,
                [](const std::string& n) { return isLayer(n, 1) || isLayer(n, 2); });
    const auto file = gguf::File::open(shard);
    const auto config = model::ModelConfig::fromGguf(file);
    const auto w = model::ModelWeights::bindRange(file, config, 1, 3, false, false);
    QCOMPARE(w.layers.size(), size_t(4));
    using model::TensorRole;
    QVERIFY(w.layers[1][TensorRole::Wq] && w.layers[2][TensorRole::WDown]);
    QVERIFY(!w.layers[0][TensorRole::Wq] && !w.layers[3][TensorRole::Wq]);
    QVERIFY(!w[TensorRole::TokenEmbd] && !w[TensorRole::Output] && !w[TensorRole::OutputNorm]);
  }

  void wholeModelBindRefusesShard() {
    const auto shard = m_dir / "middle-only.gguf";
    writeSubset(gguf::File::open(m_full), shard,
                [](const std::string& n) { return isLayer(n, 1); });
    const auto file = gguf::File::open(shard);
    const auto config = model::ModelConfig::fromGguf(file);
    QVERIFY_THROWS_EXCEPTION(Error, model::ModelWeights::bind(file, config));
    QVERIFY_THROWS_EXCEPTION(Error,
                             model::ModelWeights::bindRange(file, config, 1, 3, false, false));
  }

  void rangeOutsideModelIsRefused() {
    const auto file = gguf::File::open(m_full);
    const auto config = model::ModelConfig::fromGguf(file);
    QVERIFY_THROWS_EXCEPTION(Error,
                             model::ModelWeights::bindRange(file, config, 2, 5, false, false));
  }

  void stageFromShardComputesSameAsFromWholeModel() {
    const auto shard = m_dir / "middle-same.gguf";
    writeSubset(gguf::File::open(m_full), shard,
                [](const std::string& n) { return isLayer(n, 1) || isLayer(n, 2); });
    const auto fromShard = middleStageHidden(shard, true);
    const auto fromFull = middleStageHidden(m_full, false);
    QVERIFY(!fromFull.empty());
    QVERIFY(fromShard == fromFull);
  }
};

QTEST_GUILESS_MAIN(TestWeightsRange)
#include "test_weights_range.moc"
