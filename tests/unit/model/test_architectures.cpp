// The architecture registry, tensor tables and layer programs as data: every registered
// architecture's program only reads tensors its table lists, every table entry is used, shard
// lists follow the table, binding is by role, and a synthetic model of each architecture binds.

#include <QtTest>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
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
    if (op.kind == model::OpKind::MoeFfn) {
      roles.insert(
          {TensorRole::GateInp, TensorRole::GateExps, TensorRole::UpExps, TensorRole::DownExps});
      if (op.moe.biases) {
        roles.insert({TensorRole::GateInpBias, TensorRole::GateExpsBias, TensorRole::UpExpsBias,
                      TensorRole::DownExpsBias});
      }
    }
    if (op.kind == model::OpKind::Attend && op.attend.sinks) roles.insert(TensorRole::AttnSinks);
  }
  return roles;
}

// Whether the table's entry applies to a model of this config.
bool applies(const model::TensorSpec& t, const model::ModelConfig& c) {
  return t.form == model::FfnForm::Any || (t.form == model::FfnForm::Experts) == (c.nExpert > 0);
}

model::ModelConfig configFor(std::string_view name, int32_t experts = 0) {
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
  c.nExpert = experts;
  c.nExpertUsed = experts > 0 ? 2 : 0;
  c.nFfExp = experts > 0 ? 64 : 0;
  return c;
}

// The configs each architecture serves: dense, with experts, or both (llama: Mixtral).
std::vector<model::ModelConfig> configsOf(std::string_view name) {
  if (name == "qwen3moe") return {configFor(name, 8)};
  if (name == "gpt-oss") {
    model::ModelConfig c = configFor(name, 8);
    c.slidingWindow = 16;
    c.slidingWindowPattern = 2;
    return {c};
  }
  if (name == "llama" || name == "mistral") return {configFor(name), configFor(name, 8)};
  return {configFor(name)};
}

}  // namespace

class TestArchitectures : public QObject {
  Q_OBJECT

 private slots:
  void registryKnowsTheFamilies() {
    for (const char* name : {"llama", "mistral", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3",
                             "phi3", "gpt-oss"}) {
      QVERIFY2(model::findArchitecture(name) != nullptr, name);
    }
    QVERIFY(model::findArchitecture("gpt-neox") == nullptr);
  }

  void programsReadOnlyTheirTables() {
    for (std::string_view name : model::supportedArchitectureNames()) {
      for (const model::ModelConfig& c : configsOf(name)) {
        std::set<TensorRole> layerRoles;
        for (const model::TensorSpec& t : c.arch->tensors) {
          if (t.scope == model::TensorScope::Layer && applies(t, c)) layerRoles.insert(t.role);
        }
        // The shard list of a layer is the same set.
        std::set<TensorRole> listed;
        for (const auto& st : model::stageTensors(c, 1, 2, false, false)) {
          if (st.layer == 1) listed.insert(st.role);
        }
        QVERIFY2(listed == layerRoles, std::string(name).c_str());
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
    for (const char* name : {"llama", "qwen2", "qwen3", "qwen3moe", "llama-moe", "gemma2", "gemma3",
                             "phi3", "gpt-oss"}) {
      const bool gptOss = std::string(name) == "gpt-oss";
      const bool moe = std::string(name).ends_with("moe") || gptOss;
      model::SyntheticModelSpec spec;
      spec.architecture = std::string(name) == "llama-moe" ? "llama" : name;
      spec.nVocab = 300;
      spec.nEmbd = 64;
      spec.nFf = 128;
      spec.nExpert = moe ? 4 : 0;
      spec.nExpertUsed = moe ? 2 : 0;
      spec.tiedOutput = std::string(name) == "qwen3" || std::string(name).starts_with("gemma");
      if (gptOss) {  // keys gpt-oss requires
        spec.nFfExp = 64;
        spec.slidingWindow = 16;
      }
      const std::filesystem::path path = dir.filePath(QString(name) + ".gguf").toStdString();
      model::writeSyntheticModel(spec, path);
      const auto file = gguf::File::open(path);
      const auto config = model::ModelConfig::fromGguf(file);
      QCOMPARE(config.architecture, spec.architecture);
      QCOMPARE(config.nExpert, spec.nExpert);
      QCOMPARE(config.nExpertUsed, spec.nExpertUsed);
      // Without expert_feed_forward_length: llama's experts are ff wide, qwen3moe's ff / top-k.
      if (moe) QCOMPARE(config.nFfExp, spec.architecture == "llama" ? 128 : 64);
      const auto w = model::ModelWeights::bind(file, config);
      QVERIFY(w[TensorRole::TokenEmbd] != nullptr);
      QVERIFY(w[TensorRole::Output] != nullptr);
      QCOMPARE(w[TensorRole::Output] == w[TensorRole::TokenEmbd], spec.tiedOutput);
      const bool biases = std::string(name) == "qwen2" || gptOss;
      const bool headNorms =
          spec.architecture.starts_with("qwen3") || spec.architecture == "gemma3";
      for (const auto& layer : w.layers) {
        // phi3 holds Q, K and V in one matrix (attn_qkv: qDim + 2 kvDim rows).
        if (spec.architecture == "phi3") {
          QCOMPARE(layer[TensorRole::Wqkv]->dims, (std::vector<int64_t>{64, 64 + 2 * 64}));
          QCOMPARE(layer[TensorRole::WUp]->dims, (std::vector<int64_t>{64, 2 * 128}));
        } else {
          QVERIFY(layer[TensorRole::Wq]);
        }
        QCOMPARE(layer[TensorRole::WDown] != nullptr, !moe);
        QCOMPARE(layer[TensorRole::GateInp] != nullptr, moe);
        QCOMPARE(layer[TensorRole::DownExps] != nullptr, moe);
        if (moe) {
          QCOMPARE(layer[TensorRole::UpExps]->dims,
                   (std::vector<int64_t>{64, config.nFfExp, spec.nExpert}));
          QCOMPARE(layer[TensorRole::GateInp]->type, gguf::TensorType::F32);
        }
        QCOMPARE(layer[TensorRole::Bq] != nullptr, biases);
        QCOMPARE(layer[TensorRole::AttnSinks] != nullptr, gptOss);
        QCOMPARE(layer[TensorRole::DownExpsBias] != nullptr, gptOss);
        if (gptOss) {
          QCOMPARE(layer[TensorRole::AttnSinks]->dims, (std::vector<int64_t>{spec.nHead}));
          QCOMPARE(layer[TensorRole::UpExpsBias]->dims, (std::vector<int64_t>{64, spec.nExpert}));
          QVERIFY(layer[TensorRole::FfnNorm] == nullptr);  // post_attention_norm instead
          QVERIFY(layer[TensorRole::AttnPostNorm] != nullptr);
        }
        QCOMPARE(layer[TensorRole::QNorm] != nullptr, headNorms);
      }
      // A middle range binds only its layers.
      const auto ranged = model::ModelWeights::bindRange(file, config, 1, 2, false, false);
      QVERIFY(ranged.layers[0][TensorRole::AttnNorm] == nullptr);
      QVERIFY(ranged.layers[1][TensorRole::AttnNorm] != nullptr);
      QVERIFY(ranged[TensorRole::TokenEmbd] == nullptr);
    }
  }

  // A qwen3moe file without experts, and expert counts that cannot route, are refused by key.
  void expertMetadataIsChecked() {
    QTemporaryDir dir;
    model::SyntheticModelSpec spec;
    spec.architecture = "qwen3";  // qwen3's tensors, relabelled qwen3moe below: no experts
    spec.nVocab = 300;
    spec.nEmbd = 64;
    spec.nFf = 128;
    const std::string dense = dir.filePath("dense.gguf").toStdString();
    model::writeSyntheticModel(spec, dense);
    const auto file = gguf::File::open(dense);
    gguf::Writer w;
    for (const auto& kv : file.metadata()) {
      std::string key = kv.key;
      if (key.starts_with("qwen3.")) key = "qwen3moe." + key.substr(6);
      w.set(key, key == "general.architecture" ? gguf::Value::string("qwen3moe") : kv.value);
    }
    const std::string relabelled = dir.filePath("relabelled.gguf").toStdString();
    w.write(relabelled);
    try {
      model::ModelConfig::fromGguf(gguf::File::open(relabelled));
      QFAIL("a qwen3moe file without experts loaded");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("expert_count") != std::string::npos, e.what());
    }
    // More experts per token than there are.
    gguf::Writer w2;
    for (const auto& kv : file.metadata()) w2.set(kv.key, kv.value);
    w2.set("qwen3.expert_count", gguf::Value::u32(4));
    w2.set("qwen3.expert_used_count", gguf::Value::u32(5));
    const std::string tooMany = dir.filePath("too_many.gguf").toStdString();
    w2.write(tooMany);
    try {
      model::ModelConfig::fromGguf(gguf::File::open(tooMany));
      QFAIL("5 of 4 experts loaded");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("expert_used_count") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(Error, [] {
      model::SyntheticModelSpec bad;
      bad.nVocab = 300;
      bad.nExpert = 4;
      bad.nExpertUsed = 0;
      model::syntheticTensors(bad);
    }());
  }

  // rope.scaling.*: linear and YaRN are read as llama.cpp reads them (factor as 1 / factor in
  // float, YaRN's original context defaulting to the training context); other types are refused
  // by name.
  void ropeScalingIsReadAsLlamaCppReadsIt() {
    QTemporaryDir dir;
    auto configWith = [&](const std::string& type, float factor, int origCtx) {
      model::SyntheticModelSpec spec;
      spec.nVocab = 300;
      spec.nEmbd = 64;
      spec.nFf = 128;
      spec.nCtx = 1024;
      spec.ropeScaling = type;
      spec.ropeScalingFactor = factor;
      spec.ropeOrigCtx = origCtx;
      const std::string path = dir.filePath("rope.gguf").toStdString();
      model::writeSyntheticModel(spec, path);
      return model::ModelConfig::fromGguf(gguf::File::open(path));
    };
    const model::ModelConfig yarn = configWith("yarn", 4.0f, 256);
    QCOMPARE(yarn.ropeScaling, model::RopeScaling::Yarn);
    QCOMPARE(yarn.ropeFreqScale, 0.25f);
    QCOMPARE(yarn.ropeOrigCtx, 256);
    const model::LayerProgram p = yarn.arch->layerProgram(yarn, 0);
    const auto rope = std::find_if(p.ops.begin(), p.ops.end(), [](const model::Op& op) {
      return op.kind == model::OpKind::Rope;
    });
    QVERIFY(rope != p.ops.end());
    QCOMPARE(rope->rope.extFactor, 1.0f);
    QCOMPARE(rope->rope.nCtxOrig, 256);
    // get_mscale(4) times the cancelling 1 / (1 + 0.1 ln 4): 1 up to rounding.
    QVERIFY(std::fabs(rope->rope.attnFactor - 1.0f) < 1e-6f);
    QCOMPARE(configWith("yarn", 4.0f, 0).ropeOrigCtx, 1024);
    const model::ModelConfig linear = configWith("linear", 2.0f, 0);
    QCOMPARE(linear.ropeScaling, model::RopeScaling::Linear);
    QCOMPARE(linear.ropeFreqScale, 0.5f);
    QCOMPARE(linear.arch->layerProgram(linear, 0).ops[2].rope.extFactor, 0.0f);

    model::SyntheticModelSpec spec;
    spec.nVocab = 300;
    spec.nEmbd = 64;
    spec.nFf = 128;
    const std::string path = dir.filePath("plain.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    const auto file = gguf::File::open(path);
    gguf::Writer w;
    for (const auto& kv : file.metadata()) w.set(kv.key, kv.value);
    w.set("llama.rope.scaling.type", gguf::Value::string("longrope"));
    const std::string longrope = dir.filePath("longrope.gguf").toStdString();
    w.write(longrope);
    try {
      model::ModelConfig::fromGguf(gguf::File::open(longrope));
      QFAIL("an unknown RoPE scaling loaded");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("'longrope'") != std::string::npos, e.what());
    }
  }

  // phi3 LongRoPE: both factor tensors bind (in every stage's shard list, as global tensors),
  // the Rope ops divide by frequency factors, the attention factor scales cos and sin, and a
  // stage takes the long factors only when its context exceeds the original one. A file with
  // one of the two factor tensors is refused, naming them.
  void phi3LongRopeFactorsFollowTheContextLength() {
    QTemporaryDir dir;
    model::SyntheticModelSpec spec;
    spec.architecture = "phi3";
    spec.nVocab = 300;
    spec.nEmbd = 64;
    spec.nFf = 128;
    spec.nCtx = 4096;
    spec.ropeOrigCtx = 256;
    spec.ropeAttnFactor = 1.25f;
    spec.longRope = true;
    const std::string path = dir.filePath("phi3-longrope.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    const auto file = gguf::File::open(path);
    const model::ModelConfig c = model::ModelConfig::fromGguf(file);
    QVERIFY(c.hasRopeFreqs);
    QCOMPARE(c.ropeOrigCtx, 256);
    const model::LayerProgram p = c.arch->layerProgram(c, 0);
    for (const model::Op& op : p.ops) {
      if (op.kind != model::OpKind::Rope) continue;
      QVERIFY(op.rope.freqFactors);
      QCOMPARE(op.rope.attnFactor, 1.25f);
      QCOMPARE(op.rope.extFactor, 0.0f);
    }
    std::set<std::string> shard;
    for (const auto& st : model::stageTensors(c, 1, 2, false, false)) shard.insert(st.name);
    QVERIFY(shard.count("rope_factors_long.weight") && shard.count("rope_factors_short.weight"));

    const model::ModelWeights w = model::ModelWeights::bind(file, c);
    const model::Tensor longFactors = w[TensorRole::RopeFactorsLong];
    const model::Tensor shortFactors = w[TensorRole::RopeFactorsShort];
    QVERIFY(longFactors && shortFactors && longFactors != shortFactors);
    QCOMPARE(longFactors->elementCount(), int64_t{c.nRot / 2});
    QVERIFY(w.ropeFactors(c, 256) == shortFactors);  // n_ctx_seq == original: short
    QVERIFY(w.ropeFactors(c, 257) == longFactors);
    QVERIFY(w.ropeFactors(c, 4096) == longFactors);
    // The long factors rise far above the short ones at the last pair (the synthetic curve).
    const float* l = reinterpret_cast<const float*>(longFactors->data);
    const float* s = reinterpret_cast<const float*>(shortFactors->data);
    QVERIFY(l[c.nRot / 2 - 1] > 32.0f && s[c.nRot / 2 - 1] < 2.0f);

    gguf::Writer half;
    for (const auto& kv : file.metadata()) half.set(kv.key, kv.value);
    for (const auto& t : file.tensors()) {
      if (t.name == "rope_factors_short.weight") continue;
      half.addTensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.nbytes));
    }
    const std::string halfPath = dir.filePath("half.gguf").toStdString();
    half.write(halfPath);
    try {
      model::ModelConfig::fromGguf(gguf::File::open(halfPath));
      QFAIL("a LongRoPE model with one factor tensor loaded");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("rope_factors_short.weight") != std::string::npos,
               e.what());
    }
  }

  // gemma3: five of every six layers (here two of three: sliding_window_pattern 3) attend over
  // the window with the local RoPE base; the embedding is scaled once, in layer 0; final logit
  // soft-capping is read when present (none by default), a negative cap refused by key.
  void gemma3LayersAlternateSlidingAndGlobalAttention() {
    QTemporaryDir dir;
    model::SyntheticModelSpec spec;
    spec.architecture = "gemma3";
    spec.nLayer = 6;
    spec.nVocab = 300;
    spec.nEmbd = 64;
    spec.nFf = 128;
    spec.tiedOutput = true;
    spec.ropeFreqBase = 1e6f;
    spec.slidingWindow = 48;
    spec.slidingWindowPattern = 3;
    const std::string path = dir.filePath("gemma3.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    const auto file = gguf::File::open(path);
    const model::ModelConfig c = model::ModelConfig::fromGguf(file);
    for (int32_t l = 0; l < c.nLayer; ++l) {
      const model::LayerProgram p = c.arch->layerProgram(c, l);
      const bool sliding = l % 3 < 2;
      int scales = 0;
      for (const model::Op& op : p.ops) {
        if (op.kind == model::OpKind::Attend) QCOMPARE(op.attend.window, sliding ? 48 : 0);
        if (op.kind == model::OpKind::Rope) QCOMPARE(op.rope.freqBase, sliding ? 1e4f : 1e6f);
        if (op.kind == model::OpKind::Scale && op.dst == model::Buffer::X) {
          QCOMPARE(op.factor, 8.0f);  // sqrt(64)
          ++scales;
        }
        if (op.kind == model::OpKind::GatedFfn) {
          QVERIFY(op.activation == model::Activation::GeluTanh);
        }
      }
      QCOMPARE(scales, l == 0 ? 1 : 0);
    }
    gguf::Writer w;
    for (const auto& kv : file.metadata()) w.set(kv.key, kv.value);
    QCOMPARE(c.finalLogitSoftcap, 0.0f);
    w.set("gemma3.final_logit_softcapping", gguf::Value::f32(30.0f));
    const std::string capped = dir.filePath("capped.gguf").toStdString();
    w.write(capped);
    QCOMPARE(model::ModelConfig::fromGguf(gguf::File::open(capped)).finalLogitSoftcap, 30.0f);
    w.set("gemma3.final_logit_softcapping", gguf::Value::f32(-1.0f));
    w.write(capped);
    try {
      model::ModelConfig::fromGguf(gguf::File::open(capped));
      QFAIL("a negative soft-cap loaded");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("final_logit_softcapping") != std::string::npos,
               e.what());
    }
  }

  // gemma2: llama.cpp's defaults without keys (soft-caps 50 and 30, window 4096, pattern 2: even
  // layers slide), the caps on every Attend, no head norms; the same RoPE base everywhere
  // without rope.freq_base_swa.
  void gemma2DefaultsAndSoftCaps() {
    QTemporaryDir dir;
    model::SyntheticModelSpec spec;
    spec.architecture = "gemma2";
    spec.nLayer = 4;
    spec.nVocab = 300;
    spec.nEmbd = 64;
    spec.nFf = 128;
    spec.tiedOutput = true;
    spec.ropeFreqBase = 2e4f;
    const std::string path = dir.filePath("gemma2.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    const model::ModelConfig c = model::ModelConfig::fromGguf(gguf::File::open(path));
    QCOMPARE(c.attnLogitSoftcap, 50.0f);
    QCOMPARE(c.finalLogitSoftcap, 30.0f);
    QCOMPARE(c.slidingWindow, 4096);
    for (int32_t l = 0; l < c.nLayer; ++l) {
      for (const model::Op& op : c.arch->layerProgram(c, l).ops) {
        QVERIFY(op.kind != model::OpKind::HeadNorm);
        if (op.kind == model::OpKind::Attend) {
          QCOMPARE(op.attend.window, l % 2 == 0 ? 4096 : 0);
          QCOMPARE(op.attend.softcap, 50.0f);
        }
        if (op.kind == model::OpKind::Rope) QCOMPARE(op.rope.freqBase, 2e4f);
      }
    }
  }

  // gpt-oss: even layers slide (pattern 2 by default), every layer has sinks and the routed,
  // biased, clamped-SwiGLU experts weighted by a softmax over the chosen logits; the rows without
  // logits go only after the last layer. The keys llama.cpp requires are required.
  void gptOssProgramAndRequiredKeys() {
    QTemporaryDir dir;
    model::SyntheticModelSpec spec;
    spec.architecture = "gpt-oss";
    spec.nLayer = 4;
    spec.nVocab = 300;
    spec.nEmbd = 64;
    spec.nFf = 128;
    spec.nExpert = 8;
    spec.nExpertUsed = 2;
    spec.nFfExp = 64;
    spec.slidingWindow = 32;
    spec.ropeScaling = "yarn";
    spec.ropeScalingFactor = 32;
    spec.ropeOrigCtx = 128;
    const std::string path = dir.filePath("gpt-oss.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    const auto file = gguf::File::open(path);
    const model::ModelConfig c = model::ModelConfig::fromGguf(file);
    QCOMPARE(c.slidingWindowPattern, 2);
    for (int32_t l = 0; l < c.nLayer; ++l) {
      const model::LayerProgram p = c.arch->layerProgram(c, l);
      QCOMPARE(p.ops.back().kind, model::OpKind::KeepOutputRows);
      int moes = 0;
      for (const model::Op& op : p.ops) {
        if (op.kind == model::OpKind::Attend) {
          QCOMPARE(op.attend.window, l % 2 == 0 ? 32 : 0);
          QVERIFY(op.attend.sinks);
        }
        if (op.kind == model::OpKind::Rope) {
          QCOMPARE(op.rope.extFactor, 1.0f);  // YaRN on every layer
          QCOMPARE(op.rope.freqScale, 1.0f / 32);
        }
        if (op.kind == model::OpKind::MoeFfn) {
          ++moes;
          QVERIFY(op.moe.gating == model::MoeGating::SoftmaxWeight);
          QVERIFY(op.moe.biases);
          QVERIFY(!op.moe.normalizeWeights);
          QVERIFY(op.activation == model::Activation::SwigluOai);
        }
      }
      QCOMPARE(moes, 1);
    }
    // Each required key, dropped, is named in the refusal.
    for (const char* key : {"gpt-oss.attention.sliding_window",
                            "gpt-oss.expert_feed_forward_length", "gpt-oss.expert_count"}) {
      gguf::Writer w;
      for (const auto& kv : file.metadata()) {
        if (kv.key != key) w.set(kv.key, kv.value);
      }
      const std::string dropped = dir.filePath("dropped.gguf").toStdString();
      w.write(dropped);
      try {
        model::ModelConfig::fromGguf(gguf::File::open(dropped));
        QFAIL(qPrintable(QString("loaded without ") + key));
      } catch (const Error& e) {
        const std::string what = e.what();
        QVERIFY2(what.find(std::string(key).substr(8)) != std::string::npos, e.what());
      }
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
