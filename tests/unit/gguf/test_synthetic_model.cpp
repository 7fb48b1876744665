// The synthetic model writer: llama-shaped tensors and metadata, bytes that are the quantized
// deterministic rows, several quant types, a copied or generated vocabulary.

#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <fstream>
#include <iterator>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/synthetic_model.h"

using namespace shoal;
using gguf::TensorType;

namespace {

model::SyntheticModelSpec smallSpec() {
  model::SyntheticModelSpec s;
  s.nLayer = 2;
  s.nEmbd = 256;
  s.nHead = 4;
  s.nHeadKv = 2;
  s.nFf = 512;
  s.nVocab = 300;
  s.nCtx = 512;
  s.seed = 42;
  s.weightType = TensorType::Q8_0;
  s.embedType = TensorType::F16;
  s.typeOverrides = {{"attn_q", TensorType::Q4_0},   {"attn_k", TensorType::Q4_K},
                     {"attn_v", TensorType::Q6_K},   {"attn_output", TensorType::Q5_K},
                     {"ffn_down", TensorType::Q5_0}, {"ffn_gate", TensorType::Q4_1},
                     {"output", TensorType::Q8_0}};
  return s;
}

std::vector<char> readAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

class SyntheticModelTest : public QObject {
  Q_OBJECT

 private slots:
  void init() { QVERIFY(m_dir.isValid()); }

  void metadataDescribesTheLlamaShape() {
    const auto path = file("m.gguf");
    model::writeSyntheticModel(smallSpec(), path);
    const gguf::File f = gguf::File::open(path);
    QCOMPARE(f.getString("general.architecture"), std::string("llama"));
    QCOMPARE(f.getInt("llama.block_count"), int64_t{2});
    QCOMPARE(f.getInt("llama.embedding_length"), int64_t{256});
    QCOMPARE(f.getInt("llama.feed_forward_length"), int64_t{512});
    QCOMPARE(f.getInt("llama.attention.head_count"), int64_t{4});
    QCOMPARE(f.getInt("llama.attention.head_count_kv"), int64_t{2});
    QCOMPARE(f.getInt("llama.context_length"), int64_t{512});
    QCOMPARE(f.getInt("llama.rope.dimension_count"), int64_t{64});
    QCOMPARE(f.getInt("llama.vocab_size"), int64_t{300});
    QCOMPARE(f.getFloat("llama.rope.freq_base"), 10000.0);
    QCOMPARE(float(f.getFloat("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
    QCOMPARE(f.find("tokenizer.ggml.tokens")->asArray()->items.size(), size_t{300});
  }

  void tensorsHaveLlamaNamesShapesAndRequestedTypes() {
    const auto path = file("m.gguf");
    model::writeSyntheticModel(smallSpec(), path);
    const gguf::File f = gguf::File::open(path);
    QCOMPARE(f.tensors().size(), size_t{2 * 9 + 3});
    auto check = [&](const char* name, TensorType type, std::vector<int64_t> dims) {
      const gguf::TensorInfo* t = f.findTensor(name);
      QVERIFY2(t != nullptr, name);
      QCOMPARE(t->type, type);
      QCOMPARE(t->dims, dims);
    };
    check("token_embd.weight", TensorType::F16, {256, 300});
    check("blk.1.attn_norm.weight", TensorType::F32, {256});
    check("blk.1.attn_q.weight", TensorType::Q4_0, {256, 256});
    check("blk.1.attn_k.weight", TensorType::Q4_K, {256, 128});
    check("blk.1.attn_v.weight", TensorType::Q6_K, {256, 128});
    check("blk.1.attn_output.weight", TensorType::Q5_K, {256, 256});
    check("blk.0.ffn_norm.weight", TensorType::F32, {256});
    check("blk.0.ffn_gate.weight", TensorType::Q4_1, {256, 512});
    check("blk.0.ffn_up.weight", TensorType::Q8_0, {256, 512});
    check("blk.0.ffn_down.weight", TensorType::Q5_0, {512, 256});
    check("output_norm.weight", TensorType::F32, {256});
    check("output.weight", TensorType::Q8_0, {256, 300});
  }

  void tensorBytesAreTheQuantizedDeterministicRows() {
    const model::SyntheticModelSpec spec = smallSpec();
    const auto path = file("m.gguf");
    model::writeSyntheticModel(spec, path);
    const gguf::File f = gguf::File::open(path);
    for (const model::SyntheticTensor& st : model::syntheticTensors(spec)) {
      const gguf::TensorInfo* t = f.findTensor(st.name);
      QVERIFY2(t != nullptr, st.name.c_str());
      const int64_t n = t->dims[0];
      const size_t rowSize = gguf::rowBytes(t->type, n);
      std::vector<float> row(static_cast<size_t>(n));
      std::vector<uint8_t> expected(rowSize);
      for (int64_t r = 0; r < t->rows(); ++r) {
        model::syntheticRow(spec, st.name, r, row.data(), n);
        gguf::quantizeRow(t->type, row.data(), expected.data(), n);
        QVERIFY2(std::equal(expected.begin(), expected.end(), t->data + r * rowSize),
                 qPrintable(QString("%1 row %2").arg(st.name.c_str()).arg(r)));
      }
    }
  }

  void weightsHaveTheIntendedScale() {
    const model::SyntheticModelSpec spec = smallSpec();
    std::vector<float> row(4096);
    model::syntheticRow(spec, "blk.0.ffn_up.weight", 3, row.data(), 4096);
    double sum = 0, sq = 0;
    for (float v : row) {
      sum += v;
      sq += double(v) * v;
    }
    const double mean = sum / 4096, sd = std::sqrt(sq / 4096 - mean * mean);
    QVERIFY2(std::fabs(mean) < 0.002 && std::fabs(sd - 0.02) < 0.002,
             qPrintable(QString::number(sd)));
    model::syntheticRow(spec, "blk.0.attn_norm.weight", 0, row.data(), 4096);
    sum = 0;
    for (float v : row) sum += v;
    QVERIFY(std::fabs(sum / 4096 - 1.0) < 0.01);
  }

  void sameSpecWritesIdenticalBytesAndAnotherSeedDoesNot() {
    model::SyntheticModelSpec spec = smallSpec();
    model::writeSyntheticModel(spec, file("a.gguf"));
    model::writeSyntheticModel(spec, file("b.gguf"));
    spec.seed = 43;
    model::writeSyntheticModel(spec, file("c.gguf"));
    QVERIFY(readAll(file("a.gguf")) == readAll(file("b.gguf")));
    QVERIFY(readAll(file("a.gguf")) != readAll(file("c.gguf")));
  }

  void tiedOutputOmitsTheOutputMatrix() {
    model::SyntheticModelSpec spec = smallSpec();
    spec.tiedOutput = true;
    model::writeSyntheticModel(spec, file("t.gguf"));
    const gguf::File f = gguf::File::open(file("t.gguf"));
    QVERIFY(f.findTensor("output.weight") == nullptr);
    QVERIFY(f.findTensor("output_norm.weight") != nullptr);
  }

  void vocabularyIsCopiedFromAnotherFile() {
    gguf::Writer v;
    std::vector<gguf::Value> tokens;
    for (int i = 0; i < 320; ++i) {
      std::string text = "t";  // (not "t" + ...: GCC 12 warns falsely about that)
      text += std::to_string(i);
      tokens.push_back(gguf::Value::string(text));
    }
    v.set("general.architecture", gguf::Value::string("llama"));
    v.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
    v.set("tokenizer.ggml.pre", gguf::Value::string("smollm"));
    v.set("tokenizer.ggml.tokens", gguf::Value::array(gguf::ValueType::String, tokens));
    v.set("tokenizer.ggml.merges",
          gguf::Value::array(gguf::ValueType::String, {gguf::Value::string("t 1")}));
    v.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(2));
    v.write(file("vocab.gguf"));

    model::SyntheticModelSpec spec = smallSpec();
    spec.nVocab = 0;
    spec.vocabFrom = file("vocab.gguf").string();
    model::writeSyntheticModel(spec, file("m.gguf"));
    const gguf::File f = gguf::File::open(file("m.gguf"));
    QCOMPARE(f.getString("tokenizer.ggml.model"), std::string("gpt2"));
    QCOMPARE(f.getString("tokenizer.ggml.pre"), std::string("smollm"));
    QCOMPARE(f.getInt("tokenizer.ggml.eos_token_id"), int64_t{2});
    QCOMPARE(f.find("tokenizer.ggml.tokens")->asArray()->items.size(), size_t{320});
    QCOMPARE(f.getInt("llama.vocab_size"), int64_t{320});
    QCOMPARE(f.findTensor("token_embd.weight")->dims, (std::vector<int64_t>{256, 320}));

    spec.nVocab = 100;  // disagrees with the copied tokenizer
    QVERIFY_THROWS_EXCEPTION(shoal::Error, model::writeSyntheticModel(spec, file("x.gguf")));
  }

  void rowLengthIncompatibleWithTheTypeIsRejected() {
    model::SyntheticModelSpec spec = smallSpec();
    spec.nEmbd = 96;  // not a multiple of 256
    spec.nHead = 3;
    spec.nHeadKv = 3;
    try {
      model::syntheticTensors(spec);
      QFAIL("expected shoal::Error");
    } catch (const shoal::Error& e) {
      const std::string msg = e.what();
      QVERIFY2(msg.find("blk.0.attn_k.weight") != std::string::npos, e.what());
      QVERIFY2(msg.find("q4_K block size 256") != std::string::npos, e.what());
    }
  }

  void invalidShapesAreRejected() {
    model::SyntheticModelSpec spec = smallSpec();
    spec.nHeadKv = 3;  // 4 heads are not a multiple of 3 kv heads
    QVERIFY_THROWS_EXCEPTION(shoal::Error, model::syntheticTensors(spec));
    spec = smallSpec();
    spec.nVocab = 10;  // too small for the generated vocabulary
    QVERIFY_THROWS_EXCEPTION(shoal::Error, model::syntheticTensors(spec));
    spec = smallSpec();
    spec.typeOverrides["attn_x"] = TensorType::Q8_0;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, model::syntheticTensors(spec));
  }

 private:
  std::filesystem::path file(const char* name) const {
    return std::filesystem::path(m_dir.path().toStdString()) / name;
  }
  QTemporaryDir m_dir;
};

QTEST_GUILESS_MAIN(SyntheticModelTest)
#include "test_synthetic_model.moc"
