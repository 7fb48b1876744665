// The CPU backend is bit-identical to llama.cpp on every architecture it loads beyond the
// default model's llama: small synthetic models of qwen3, qwen3moe (8 experts top-2; 128
// experts top-8, Qwen3-30B-A3B's routing), Mixtral-style llama with experts, and qwen3 and llama
// with YaRN RoPE, gemma3 (GeGLU, post norms, sliding-window layers), phi3 (fused Q/K/V and
// gate/up matrices), in Q8_0 and
// K-quant types (tests/fixtures/llamacpp_arch.json, written by tools/llamacpp/gen_arch_fixtures.py
// with llama-cpp-python 0.3.36, CPU, 2 threads, f16 KV cache, no flash attention).
//
// Each model is written here by the same writer from the fixture's spec, and its sha256 checked
// first (a writer change must regenerate the fixtures, and says so). Then, per prompt of 1, 7
// and 300 random token ids: the prompt in one batch, 64 greedy steps of one token, and at every
// step the whole logits row must hash (FNV-1a over its float32 bytes) as llama.cpp's did, and
// the token must be llama.cpp's. Skipped when the default model (the tokenizer the synthetic
// models copy) is absent.

#include <QCryptographicHash>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/synthetic_model.h"
#include "engine/runtime/chain.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"

using namespace shoal;

namespace {

nlohmann::json loadFixtures() {
  std::ifstream in(std::string(SHOAL_FIXTURES_DIR) + "/llamacpp_arch.json");
  return nlohmann::json::parse(in);
}

std::filesystem::path defaultModel() {
  return std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

gguf::TensorType typeOf(const std::string& name) {
  const auto t = gguf::typeFromName(name);
  if (!t) throw std::runtime_error("unknown type " + name);
  return *t;
}

// The SyntheticModelSpec of a fixture spec (the fields gen_arch_fixtures.py passes to
// shoal-synth-model; the embedding takes --type, as the tool's default).
model::SyntheticModelSpec specOf(const nlohmann::json& j, int nCtx) {
  model::SyntheticModelSpec s;
  s.architecture = j["arch"].get<std::string>();
  s.nLayer = j["layers"].get<int>();
  s.nEmbd = j["embd"].get<int>();
  s.nHead = j["heads"].get<int>();
  s.nHeadKv = j["kv_heads"].get<int>();
  s.nFf = j["ff"].get<int>();
  s.nExpert = j.value("experts", 0);
  s.nExpertUsed = j.value("experts_used", 0);
  s.nFfExp = j.value("ff_expert", 0);
  s.ropeScaling = j.value("rope_scaling", std::string());
  s.ropeScalingFactor = j.value("rope_scale", 1.0f);
  s.ropeOrigCtx = j.value("rope_orig_ctx", 0);
  s.ropeAttnFactor = j.value("rope_attn_factor", 0.0f);
  s.longRope = j.value("long_rope", false);
  s.slidingWindow = j.value("sliding_window", 0);
  s.slidingWindowPattern = j.value("sliding_window_pattern", 0);
  s.attnLogitSoftcap = j.value("attn_softcap", 0.0f);
  s.finalLogitSoftcap = j.value("final_softcap", 0.0f);
  s.ropeFreqBase = j.value("rope_base", s.ropeFreqBase);
  s.tiedOutput = j.value("tied", false);
  s.weightType = s.embedType = typeOf(j["type"].get<std::string>());
  const nlohmann::json typeOverrides = j.value("type_of", nlohmann::json::object());
  for (const auto& [kind, type] : typeOverrides.items()) {
    s.typeOverrides[kind] = typeOf(type.get<std::string>());
  }
  s.seed = j["seed"].get<uint64_t>();
  s.nCtx = nCtx;
  s.vocabFrom = defaultModel().string();
  return s;
}

std::string sha256Of(const std::filesystem::path& path) {
  QFile f(QString::fromStdString(path.string()));
  if (!f.open(QIODevice::ReadOnly)) return {};
  QCryptographicHash h(QCryptographicHash::Sha256);
  h.addData(&f);
  return h.result().toHex().toStdString();
}

std::string fnv1a64(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// One synthetic model, written and loaded once for all its prompts.
struct LoadedModel {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<model::ModelConfig> config;
  std::unique_ptr<model::ModelWeights> weights;
  std::unique_ptr<runtime::Chain> chain;
};

}  // namespace

class CpuArchParityTest : public QObject {
  Q_OBJECT

  nlohmann::json m_fixtures;
  QTemporaryDir m_dir;
  std::unique_ptr<cpu::CpuBackend> m_backend;
  std::map<std::string, LoadedModel> m_models;

  LoadedModel& model(size_t index) {
    const auto& entry = m_fixtures["models"][index];
    const std::string name = entry["spec"]["name"].get<std::string>();
    if (auto it = m_models.find(name); it != m_models.end()) return it->second;
    const int nCtx = m_fixtures["meta"]["n_ctx"].get<int>();
    const auto path = std::filesystem::path(m_dir.path().toStdString()) / (name + ".gguf");
    model::writeSyntheticModel(specOf(entry["spec"], nCtx), path);
    const std::string sha = sha256Of(path);
    if (sha != entry["sha256"].get<std::string>()) {
      throw std::runtime_error(name + ": the writer's output (sha256 " + sha +
                               ") is not the file the fixtures were made from; regenerate them "
                               "with tools/llamacpp/gen_arch_fixtures.py");
    }
    LoadedModel m;
    m.file = std::make_unique<gguf::File>(gguf::File::open(path));
    m.config = std::make_unique<model::ModelConfig>(model::ModelConfig::fromGguf(*m.file));
    m.weights =
        std::make_unique<model::ModelWeights>(model::ModelWeights::bind(*m.file, *m.config));
    runtime::StageSpec spec;
    spec.lastLayer = m.config->nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = nCtx;
    spec.maxBatch = m_fixtures["meta"]["n_batch"].get<int>();
    runtime::ModelSource src{m.file.get(), m.config.get(), m.weights.get()};
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(m_backend->createStage("cpu0", src, spec));
    m.chain = std::make_unique<runtime::Chain>(std::move(stages));
    return m_models.emplace(name, std::move(m)).first->second;
  }

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(defaultModel())) {
      QSKIP("default model absent (run scripts/setup)");
    }
    QVERIFY(m_dir.isValid());
    m_fixtures = loadFixtures();
    QCOMPARE(m_fixtures["meta"]["vocab_from_sha256"].get<std::string>(), sha256Of(defaultModel()));
    m_backend = std::make_unique<cpu::CpuBackend>(m_fixtures["meta"]["n_threads"].get<int>());
    qInfo("CPU kernels: %s", std::string(cpu::isaName(cpu::kernels().isa)).c_str());
  }

  void logitsAreLlamaCppsBitForBit_data() {
    QTest::addColumn<int>("modelIndex");
    QTest::addColumn<int>("runIndex");
    const auto fixtures = loadFixtures();
    for (size_t m = 0; m < fixtures["models"].size(); ++m) {
      const auto& entry = fixtures["models"][m];
      for (size_t r = 0; r < entry["runs"].size(); ++r) {
        const std::string row = entry["spec"]["name"].get<std::string>() + " prompt " +
                                std::to_string(entry["runs"][r]["prompt_ids"].size());
        QTest::newRow(row.c_str()) << static_cast<int>(m) << static_cast<int>(r);
      }
    }
  }
  void logitsAreLlamaCppsBitForBit() {
    QFETCH(int, modelIndex);
    QFETCH(int, runIndex);
    LoadedModel* m = nullptr;
    try {
      m = &model(static_cast<size_t>(modelIndex));
    } catch (const std::exception& e) {
      QFAIL(e.what());
    }
    const auto& run = m_fixtures["models"][static_cast<size_t>(modelIndex)]["runs"]
                                [static_cast<size_t>(runIndex)];
    const auto prompt = run["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = run["tokens"].get<std::vector<int32_t>>();
    const auto hashes = run["logits_fnv1a"].get<std::vector<std::string>>();

    m->chain->truncate(0, 0);
    std::vector<float> logits;
    m->chain->forward(0, 0, prompt, logits);
    int32_t position = static_cast<int32_t>(prompt.size());
    for (size_t step = 0; step < want.size(); ++step) {
      if (fnv1a64(logits) != hashes[step]) {
        QString detail;
        if (step == 0) {
          for (const auto& [id, logit] : run["top"].get<std::vector<std::pair<int, double>>>()) {
            detail += QString(" %1:%2/%3").arg(id).arg(logit).arg(logits[static_cast<size_t>(id)]);
          }
        }
        QFAIL(qPrintable(QString("step %1: logits differ from llama.cpp's (token %2, llama.cpp "
                                 "%3)%4")
                             .arg(step)
                             .arg(argmax(logits))
                             .arg(want[step])
                             .arg(detail.isEmpty() ? "" : "; top-10 id:llama.cpp/shoal" + detail)));
      }
      const int32_t token = argmax(logits);
      QCOMPARE(token, want[step]);
      if (step + 1 < want.size()) m->chain->forward(0, position++, std::span(&token, 1), logits);
    }
  }
};

QTEST_GUILESS_MAIN(CpuArchParityTest)
#include "test_cpu_arch_parity.moc"
