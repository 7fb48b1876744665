// The architecture registry, tensor tables and layer programs as data: every registered
// architecture's program only reads tensors its table lists, every table entry is used, shard
// lists follow the table, binding is by role, and a synthetic model of each architecture binds.

#include <QtTest>
#include <filesystem>
#include <set>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/architecture.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/synthetic_model.h"

using namespace shoal;
using model::TensorRole;

namespace {

// Roles a program reads.
std::set<TensorRole> rolesRead(const model::LayerProgram& p) {
  std::set<TensorRole> roles;
  for (const model::Op& op : p.ops) {
    if (op.weight != TensorRole::Count) roles.insert(op.weight);
    for (uint8_t i = 0; i < op.outCount; ++i) roles.insert(op.outs[i].weight);
    if (op.kind == model::OpKind::GatedFfn) roles.insert(op.ffn.begin(), op.ffn.end());
  }
  return roles;
}

model::ModelConfig configFor(std::string_view name) {
  model::ModelConfig c;
  c.architecture = std::string(name);
  c.arch = model::findArchitecture(name);
  c.nLayer = 3;
  c.nEmbd = 64;
  c.nFf = 128;
  c.nHead = 4;
  c.nHeadKv = 2;
  c.headDim = 16;
  c.nRot = 16;
  c.nVocab = 300;
  return c;
}

}  // namespace

class TestArchitectures : public QObject {
  Q_OBJECT

 private slots:
  void registryKnowsTheFamilies() {
    for (const char* name : {"llama", "mistral", "qwen2", "qwen3"}) {
      QVERIFY2(model::findArchitecture(name) != nullptr, name);
    }
    QVERIFY(model::findArchitecture("gpt-neox") == nullptr);
  }

  void programsReadOnlyTheirTables() {
    for (std::string_view name : model::supportedArchitectureNames()) {
      const model::ModelConfig c = configFor(name);
      std::set<TensorRole> layerRoles;
      for (const model::TensorSpec& t : c.arch->tensors) {
        if (t.scope == model::TensorScope::Layer) layerRoles.insert(t.role);
      }
      for (int32_t l = 0; l < c.nLayer; ++l) {
        const model::LayerProgram p = c.arch->layerProgram(c, l);
        QCOMPARE(p.kvDim, c.kvDim());
        const std::set<TensorRole> read = rolesRead(p);
        // Every role read is a layer tensor of the table, and every layer tensor is read.
        QVERIFY2(read == layerRoles, std::string(name).c_str());
        // Exactly one attention, and the output rows are narrowed after it.
        int attends = 0, keeps = 0;
        for (const model::Op& op : p.ops) {
          attends += op.kind == model::OpKind::Attend;
          keeps += op.kind == model::OpKind::KeepOutputRows;
        }
        QCOMPARE(attends, 1);
        QCOMPARE(keeps, 1);
      }
    }
  }

  void stageTensorsFollowTheTable() {
    const model::ModelConfig c = configFor("qwen3");
    const auto middle = model::stageTensors(c, 1, 2, false, false);
    // Layer 1's tensors only (rope_freqs is global and optional).
    std::set<std::string> names;
    for (const auto& t : middle) {
      if (t.required) names.insert(t.name);
    }
    QVERIFY(names.count("blk.1.attn_q_norm.weight"));
    QVERIFY(names.count("blk.1.attn_k_norm.weight"));
    QVERIFY(names.count("blk.1.ffn_down.weight"));
    QVERIFY(!names.count("blk.0.ffn_down.weight"));
    QVERIFY(!names.count("token_embd.weight"));
    QVERIFY(!names.count("output_norm.weight"));
    const auto head = model::stageTensors(c, 2, 3, false, true);
    bool outputNorm = false, embdOptional = false;
    for (const auto& t : head) {
      outputNorm = outputNorm || (t.name == "output_norm.weight" && t.required);
      embdOptional = embdOptional || (t.name == "token_embd.weight" && !t.required);
    }
    QVERIFY(outputNorm);
    QVERIFY(embdOptional);  // a tied head needs it; a shard cannot tell
  }

  void syntheticModelsOfEveryArchitectureBind() {
    QTemporaryDir dir;
    for (const char* name : {"llama", "qwen2", "qwen3"}) {
      model::SyntheticModelSpec spec;
      spec.architecture = name;
      spec.nVocab = 300;
      spec.nEmbd = 64;
      spec.nFf = 128;
      spec.tiedOutput = std::string(name) == "qwen3";
      const std::filesystem::path path = dir.filePath(QString(name) + ".gguf").toStdString();
      model::writeSyntheticModel(spec, path);
      const auto file = gguf::File::open(path);
      const auto config = model::ModelConfig::fromGguf(file);
      QCOMPARE(QString::fromStdString(config.architecture), QString(name));
      const auto w = model::ModelWeights::bind(file, config);
      QVERIFY(w[TensorRole::TokenEmbd] != nullptr);
      QVERIFY(w[TensorRole::Output] != nullptr);
      QCOMPARE(w[TensorRole::Output] == w[TensorRole::TokenEmbd], spec.tiedOutput);
      const bool biases = std::string(name) == "qwen2";
      const bool headNorms = std::string(name) == "qwen3";
      for (const auto& layer : w.layers) {
        QVERIFY(layer[TensorRole::Wq] && layer[TensorRole::WDown]);
        QCOMPARE(layer[TensorRole::Bq] != nullptr, biases);
        QCOMPARE(layer[TensorRole::QNorm] != nullptr, headNorms);
      }
      // A middle range binds only its layers.
      const auto ranged = model::ModelWeights::bindRange(file, config, 1, 2, false, false);
      QVERIFY(ranged.layers[0][TensorRole::Wq] == nullptr);
      QVERIFY(ranged.layers[1][TensorRole::Wq] != nullptr);
      QVERIFY(ranged[TensorRole::TokenEmbd] == nullptr);
    }
  }

  void unknownArchitectureIsNamed() {
    model::SyntheticModelSpec spec;
    spec.architecture = "gpt-neox";
    QVERIFY_THROWS_EXCEPTION(Error, model::syntheticTensors(spec));
  }
};

QTEST_GUILESS_MAIN(TestArchitectures)
#include "test_architectures.moc"
