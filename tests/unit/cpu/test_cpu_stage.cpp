// CpuStage on a small synthetic model: the KV cache can be truncated and rewritten without a
// trace of what it held, results do not depend on the thread count, a decode step allocates
// nothing, the tensor observer sees the layer program, a batch of several sequences computes
// exactly what each sequence computes alone, and the logits do not change while the weights move
// from the file mapping to their huge-page copy.

#include <QTemporaryDir>
#include <QtTest>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/synthetic_model.h"
#include "engine/runtime/stage.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_layer_program.h"
#include "kernels/cpu/cpu_stage.h"
#include "loaded_model.h"

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

using cpu::test::Loaded;

// Logits of one segment of `tokens` at positions [first, ...) of `sequence`.
std::vector<float> forward(runtime::Stage& stage, int32_t first, const std::vector<int32_t>& tokens,
                           int32_t sequence = 0,
                           runtime::LogitRows logits = runtime::LogitRows::Last) {
  const runtime::Segment segment{sequence, first, static_cast<int32_t>(tokens.size()), logits};
  runtime::Batch batch;
  batch.tokens = tokens;
  batch.segments = std::span(&segment, 1);
  runtime::StageOutput out;
  stage.forward(batch, out);
  return out.logits;
}

// Logits of a batch of several segments, the tokens of each segment in turn.
std::vector<float> forwardBatch(runtime::Stage& stage,
                                const std::vector<runtime::Segment>& segments,
                                const std::vector<std::vector<int32_t>>& tokens) {
  std::vector<int32_t> all;
  for (const auto& t : tokens) all.insert(all.end(), t.begin(), t.end());
  runtime::Batch batch;
  batch.tokens = all;
  batch.segments = segments;
  runtime::StageOutput out;
  stage.forward(batch, out);
  return out.logits;
}

// A stage of every layer of m, embedding and head.
std::unique_ptr<runtime::Stage> wholeModelStage(cpu::CpuBackend& backend, Loaded& m,
                                                int32_t contextLength, int32_t maxBatch,
                                                int32_t maxSequences = 1) {
  runtime::StageSpec s;
  s.lastLayer = m.config.nLayer;
  s.hasEmbedding = s.hasHead = true;
  s.contextLength = contextLength;
  s.maxBatch = maxBatch;
  s.maxSequences = maxSequences;
  runtime::ModelSource src{&m.file, &m.config, &m.weights};
  return backend.createStage("cpu0", src, s);
}

// The synthetic model `spec` written to `path`, and two whole-model stages of it: one reading
// the file mapping throughout (SHOAL_CPU_WEIGHTS=mapped), one copying its weights (the default).
struct MappedAndCopied {
  Loaded loaded;
  cpu::CpuBackend backend{2};
  std::unique_ptr<runtime::Stage> mapped, copied;
  MappedAndCopied(const model::SyntheticModelSpec& spec, const std::string& path, int32_t maxBatch)
      : loaded(written(spec, path)) {
    qputenv("SHOAL_CPU_WEIGHTS", "mapped");
    mapped = wholeModelStage(backend, loaded, 96, maxBatch);
    qunsetenv("SHOAL_CPU_WEIGHTS");
    copied = wholeModelStage(backend, loaded, 96, maxBatch);
  }
  static std::string written(const model::SyntheticModelSpec& spec, const std::string& path) {
    model::writeSyntheticModel(spec, path);
    return path;
  }
  cpu::CpuStage& copiedStage() { return dynamic_cast<cpu::CpuStage&>(*copied); }
};

}  // namespace

class CpuStageTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::unique_ptr<Loaded> m_model;

  std::unique_ptr<runtime::Stage> makeStage(cpu::CpuBackend& backend, int32_t sequences = 1) {
    return wholeModelStage(backend, *m_model, 96, 32, sequences);
  }

  // `decoders` + chunks.size() sequences with a 3-token history each; then one batch of a decode
  // row of each of the first and a chunk of chunks[i] prompt rows of each of the others must
  // give what each segment gives alone.
  void checkBatchInvariance(const model::SyntheticModelSpec& spec, const char* file,
                            int32_t decoders, std::vector<int32_t> chunks) {
    const std::string path = m_dir.filePath(file).toStdString();
    model::writeSyntheticModel(spec, path);
    Loaded m(path);
    cpu::CpuBackend backend(2);
    int32_t chunkRows = 0;
    for (int32_t c : chunks) chunkRows += c;
    const auto sequences = decoders + static_cast<int32_t>(chunks.size());
    auto batched = wholeModelStage(backend, m, 64, decoders + chunkRows, sequences);
    auto alone = wholeModelStage(backend, m, 64, decoders + chunkRows, sequences);
    for (int32_t seq = 0; seq < sequences; ++seq) {
      const std::vector<int32_t> prompt = {5 + seq, 17, 230};
      forward(*batched, 0, prompt, seq);
      forward(*alone, 0, prompt, seq);
    }
    std::vector<runtime::Segment> segments;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<float> want;
    for (int32_t seq = 0; seq < decoders; ++seq) {
      segments.push_back({seq, 3, 1, runtime::LogitRows::Last});
      tokens.push_back({40 + seq});
    }
    for (size_t c = 0; c < chunks.size(); ++c) {
      segments.push_back(
          {decoders + static_cast<int32_t>(c), 3, chunks[c], runtime::LogitRows::All});
      tokens.emplace_back();
      for (int32_t i = 0; i < chunks[c]; ++i) {
        tokens.back().push_back(1 + (i * 37 + static_cast<int32_t>(c) * 11) % 290);
      }
    }
    for (size_t i = 0; i < segments.size(); ++i) {
      const auto l = forward(*alone, 3, tokens[i], segments[i].sequence, segments[i].logits);
      want.insert(want.end(), l.begin(), l.end());
    }
    const auto got = forwardBatch(*batched, segments, tokens);
    QCOMPARE(got.size(), want.size());
    QVERIFY(cpu::test::firstBitDifference(got.data(), want.data(), want.size()) < 0);
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

  // A stage of no layer that holds the head (what a split puts on the CPU when a GPU takes every
  // layer but not the head): the body's hidden states through it give the whole model's logits,
  // bit for bit, every row or the last.
  void stageWithOnlyTheHeadGivesTheWholeModelsLogits() {
    cpu::CpuBackend backend(2);
    const runtime::ModelSource src{&m_model->file, &m_model->config, &m_model->weights};
    const int32_t layers = m_model->config.nLayer;
    runtime::StageSpec body;
    body.lastLayer = layers;
    body.hasEmbedding = true;
    body.contextLength = 32;
    body.maxBatch = 16;
    runtime::StageSpec head = body;
    head.firstLayer = layers;
    head.hasEmbedding = false;
    head.hasHead = true;
    const auto bodyStage = backend.createStage("cpu0", src, body);
    const auto headStage = backend.createStage("cpu0", src, head);
    const auto whole = wholeModelStage(backend, *m_model, 32, 16);
    const std::vector<int32_t> prompt = {5, 17, 230, 42, 99, 1, 7};
    const runtime::Segment all{0, 0, static_cast<int32_t>(prompt.size()), runtime::LogitRows::All};
    runtime::Batch batch;
    batch.tokens = prompt;
    batch.segments = std::span(&all, 1);
    runtime::StageOutput hidden, got;
    bodyStage->forward(batch, hidden);
    const auto want = forward(*whole, 0, prompt, 0, runtime::LogitRows::All);
    runtime::Batch onward;
    onward.hidden = hidden.hidden;
    onward.segments = std::span(&all, 1);
    headStage->forward(onward, got);
    QCOMPARE(got.logits.size(), want.size());
    QVERIFY(cpu::test::firstBitDifference(got.logits.data(), want.data(), want.size()) < 0);
    // The last row only.
    headStage->truncate(0, 0);
    const runtime::Segment last{0, 0, static_cast<int32_t>(prompt.size()),
                                runtime::LogitRows::Last};
    onward.segments = std::span(&last, 1);
    headStage->forward(onward, got);
    const size_t vocab = static_cast<size_t>(m_model->config.nVocab);
    QCOMPARE(got.logits.size(), vocab);
    QVERIFY(cpu::test::firstBitDifference(got.logits.data(), want.data() + want.size() - vocab,
                                          vocab) < 0);
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
    runtime::StageOutput out;
    const std::vector<int32_t> prompt = {4, 5, 6, 7};
    runtime::Segment segment{0, 0, 4, runtime::LogitRows::Last};
    runtime::Batch in;
    in.tokens = prompt;
    in.segments = std::span(&segment, 1);
    stage->forward(in, out);
    int32_t token = 9;
    segment.count = 1;
    segment.firstPosition = 4;
    in.tokens = std::span(&token, 1);
    stage->forward(in, out);  // the first decode step sizes the output
    // The background weight copy allocates on its own thread (groupRows' scratch, since this
    // model's types are read in row groups), and operator new counts every thread: with the copy
    // still running, this test failed once in about 60 runs.
    stage->settle();
    g_allocations = 0;
    g_counting = true;
    for (int32_t pos = 5; pos < 8; ++pos) {
      segment.firstPosition = pos;
      stage->forward(in, out);
    }
    g_counting = false;
    QCOMPARE(g_allocations.load(), 0);
  }

  // The weights are Q4_1 (embedding and tied head Q8_0): their dot products do not depend on
  // how many rows a product has, so batching sequences together must not change a bit.
  void segmentsOfABatchComputeWhatEachSequenceComputesAlone() {
    using runtime::LogitRows;
    cpu::CpuBackend backend(2);
    auto batched = makeStage(backend, 3);
    auto alone = makeStage(backend, 3);
    auto compare = [&](const std::vector<runtime::Segment>& segments,
                       const std::vector<std::vector<int32_t>>& tokens) {
      std::vector<float> want;
      for (size_t i = 0; i < segments.size(); ++i) {
        const auto& s = segments[i];
        const auto logits = forward(*alone, s.firstPosition, tokens[i], s.sequence, s.logits);
        want.insert(want.end(), logits.begin(), logits.end());
      }
      const auto got = forwardBatch(*batched, segments, tokens);
      QCOMPARE(got.size(), want.size());
      QVERIFY(cpu::test::firstBitDifference(got.data(), want.data(), want.size()) < 0);
    };
    // Three prompts: logits of the last row of the first, of every row of the second, none of
    // the third (1 + 3 + 0 rows, in row order).
    compare({{0, 0, 5, LogitRows::Last}, {1, 0, 3, LogitRows::All}, {2, 0, 2, LogitRows::None}},
            {{5, 17, 230, 42, 99}, {3, 44, 200}, {8, 9}});
    QCOMPARE(batched->cachedPositions(0), 5);
    QCOMPARE(batched->cachedPositions(1), 3);
    QCOMPARE(batched->cachedPositions(2), 2);
    // Decode steps and a prompt continuation at different positions, sequences out of order.
    compare({{2, 2, 1, LogitRows::Last}, {0, 5, 2, LogitRows::All}, {1, 3, 1, LogitRows::Last}},
            {{77}, {1, 2}, {250}});
    // History rewritten in one sequence only.
    batched->truncate(0, 3);
    alone->truncate(0, 3);
    compare({{1, 4, 1, LogitRows::Last}, {0, 3, 4, LogitRows::Last}}, {{6}, {10, 11, 12, 13}});
    QCOMPARE(batched->cachedPositions(0), 7);
    QCOMPARE(batched->cachedPositions(2), 3);
  }

  // Batch invariance (issue 18): decode rows of nine sequences share a batch with a nine-row
  // prompt chunk of a tenth. llama.cpp would switch every K-quant product of that 18-row batch to
  // its tiled order (8+ tokens) and the F16 head to tinyBLAS (2+); the CPU stage picks each
  // segment's order from its own rows, so every sequence gets, bit for bit, what it gets alone.
  void eachSequenceComputesWhatItComputesAloneWhateverSharesItsBatch() {
    model::SyntheticModelSpec spec;
    spec.nLayer = 2;
    spec.nEmbd = 256;  // K-quant rows: a multiple of 256
    spec.nHead = 4;
    spec.nHeadKv = 2;
    spec.nFf = 512;
    spec.nVocab = 300;
    spec.weightType = gguf::TensorType::Q4_K;
    spec.typeOverrides = {{"ffn_down", gguf::TensorType::Q6_K}, {"output", gguf::TensorType::F16}};
    checkBatchInvariance(spec, "kquant.gguf", 9, {9});
    // Prompt chunks side by side (10 and 9 rows, then 5 and 6): the repacked Q4_K kernels split
    // a product's tokens into whole fours and the rest, which must fall within each chunk as it
    // would alone. An F32 head, whose f32 activations let no last-bit difference of the hidden
    // states disappear (an F16 head's conversion to halfs mostly does).
    spec.typeOverrides = {{"ffn_down", gguf::TensorType::Q6_K}, {"output", gguf::TensorType::F32}};
    checkBatchInvariance(spec, "kquant-f32-head.gguf", 2, {10, 9, 5, 6});
  }

  // The same for a mixture of experts (qwen3moe, 4 experts, top 2, K-quant experts): llama.cpp
  // takes an expert's tiled order when 8+ rows of the batch go to it, which 16 decode rows
  // together do for at least one expert (32 routes over 4 experts) while each sends it one; the
  // CPU stage counts per segment. The 20-row chunk sends 8+ rows to some expert on its own (40
  // routes), so both orders are in play.
  void eachSequenceComputesWhatItComputesAloneThroughRoutedExperts() {
    model::SyntheticModelSpec spec;
    spec.architecture = "qwen3moe";
    spec.nLayer = 2;
    spec.nEmbd = 256;
    spec.nHead = 4;
    spec.nHeadKv = 2;
    spec.nFf = 512;
    spec.nExpert = 4;
    spec.nExpertUsed = 2;
    spec.nFfExp = 256;
    spec.nVocab = 300;
    spec.weightType = gguf::TensorType::Q4_K;
    spec.typeOverrides = {{"ffn_down_exps", gguf::TensorType::Q6_K}};
    checkBatchInvariance(spec, "moe.gguf", 16, {20});
  }

  void batchesThatDoNotAddUpAreRefused() {
    cpu::CpuBackend backend(1);
    auto stage = makeStage(backend, 2);
    // The same sequence twice, a sequence out of range, a gap in positions, rows that do not
    // match the segments.
    QVERIFY_THROWS_EXCEPTION(
        Error, forwardBatch(*stage, {{0, 0, 1, runtime::LogitRows::Last}, {0, 1, 1}}, {{1}, {2}}));
    QVERIFY_THROWS_EXCEPTION(Error, forwardBatch(*stage, {{2, 0, 1}}, {{1}}));
    QVERIFY_THROWS_EXCEPTION(Error, forwardBatch(*stage, {{1, 3, 1}}, {{1}}));
    QVERIFY_THROWS_EXCEPTION(Error, forwardBatch(*stage, {{0, 0, 2}}, {{1}}));
    QCOMPARE(stage->cachedPositions(0), 0);
  }

  // Sampling is the session's job on a local chain: a SampleRequest changes nothing.
  void stageReturnsLogitsEvenWhenAskedToSample() {
    cpu::CpuBackend backend(1);
    auto stage = makeStage(backend);
    const std::vector<int32_t> tokens = {1, 2, 3};
    const runtime::Segment segment{0, 0, 3, runtime::LogitRows::Last};
    const runtime::SampleRequest sample;
    runtime::Batch batch;
    batch.tokens = tokens;
    batch.segments = std::span(&segment, 1);
    batch.sample = &sample;
    runtime::StageOutput out;
    stage->forward(batch, out);
    QVERIFY(out.tokens.empty());
    QCOMPARE(out.logits.size(), size_t{300});
  }

  // A program the weights or the backend cannot run is refused when the stage is built, naming
  // the layer and the op.
  void unrunnableProgramsAreRefusedAtBinding() {
    using namespace model;
    const ModelConfig& c = m_model->config;
    cpu::LayerBinding b;
    b.config = &c;
    b.weights = &m_model->weights.layers[1];
    b.layer = 1;
    b.keepOutputRows = true;
    b.contextLength = 16;
    b.sequences = 1;
    auto refusal = [&](std::vector<Op> ops) -> std::string {
      LayerProgram p;
      p.kvDim = c.kvDim();
      p.ops = std::move(ops);
      std::vector<RopeParams> ropes;
      try {
        cpu::bindLayer(p, b, ropes);
      } catch (const Error& e) {
        return e.what();
      }
      return "";
    };
    const Op qkv = project(
        Buffer::Norm,
        {{TensorRole::Wq, Buffer::Q}, {TensorRole::Wk, Buffer::K}, {TensorRole::Wv, Buffer::V}});
    const Op norm = rmsNorm(Buffer::X, Buffer::Norm, TensorRole::AttnNorm, c.rmsEps);
    const Op attention = attend({0, 0.125f});
    // This llama model has no per-head query norm.
    QVERIFY(
        refusal({norm, qkv, headNorm(Buffer::Q, c.nHead, TensorRole::QNorm, c.rmsEps), attention})
            .find("attn_q_norm") != std::string::npos);
    // Q is read before anything wrote it.
    QVERIFY(refusal({attention}).find("layer 1, op 0 (Attend)") != std::string::npos);
    // Keys of dropped rows would never reach the cache.
    QVERIFY(refusal({norm, qkv, keepOutputRows(), attention}).find("KeepOutputRows") !=
            std::string::npos);
    // The rotated dimensions must fit a head.
    RopeParams wide;
    wide.nRot = c.headDim + 2;
    QVERIFY(refusal({norm, qkv, rope(Buffer::Q, c.nHead, wide), attention}).find("rotates") !=
            std::string::npos);
    // A well-formed program binds.
    QCOMPARE(refusal({norm, qkv, attention}), std::string());
  }

  // The weights are read from the file mapping at first and from their huge-page copy once each
  // layer's copy is adopted (weight_arena.h), in the middle of a run of decode steps: the logits
  // of every step are those of a stage that reads the mapping throughout, bit for bit.
  void logitsDoNotDependOnWhereTheWeightsAreRead() {
    model::SyntheticModelSpec spec;
    spec.nLayer = 8;
    spec.nEmbd = 1024;  // 40 MB of weights: a copy that takes a few decode steps
    spec.nHead = 8;
    spec.nHeadKv = 4;
    spec.nFf = 2048;
    spec.nVocab = 300;
    spec.weightType = gguf::TensorType::Q4_K;
    spec.typeOverrides = {{"ffn_down", gguf::TensorType::Q6_K}};
    MappedAndCopied stages(spec, m_dir.filePath("copied.gguf").toStdString(), 8);
    runtime::Stage &mapped = *stages.mapped, &copying = *stages.copied;
    cpu::CpuStage& stage = stages.copiedStage();
    QCOMPARE(dynamic_cast<cpu::CpuStage&>(mapped).weightUnits(), size_t{0});
    const std::vector<int32_t> prompt = {5, 17, 230, 42};
    auto check = [&](int32_t first, const std::vector<int32_t>& tokens) {
      const auto got = forward(copying, first, tokens);  // first: while its copy runs
      const auto want = forward(mapped, first, tokens);
      QCOMPARE(got.size(), want.size());
      QVERIFY(cpu::test::firstBitDifference(got.data(), want.data(), want.size()) < 0);
    };
    check(0, prompt);
    const size_t afterPrompt = stage.weightUnitsInCopy();
    for (int32_t pos = 4; pos < 40; ++pos) check(pos, {1 + (pos * 37) % 290});
    // Which units each step read from the copy depends on the timing; say what this run saw.
    qInfo("units in the copy: %zu after the prompt, %zu after 36 decode steps", afterPrompt,
          stage.weightUnitsInCopy());
    stage.waitForWeightCopy();
    const size_t units = stage.weightUnitsInCopy();
    // Every layer and the head, unless this machine has no copy (huge pages off, low memory).
    if (units == 0) QSKIP("no weight copy on this machine (transparent huge pages off)");
    // One unit per tensor: each layer's nine and the head's output and output norm.
    QCOMPARE(units, size_t{8 * 9 + 2});
    QCOMPARE(stage.weightUnits(), units);
    for (int32_t pos = 40; pos < 44; ++pos) check(pos, {2 + (pos * 11) % 290});
  }

  // Once the copy is in place, the matrices of the types the active kernel level reads in row
  // groups (row_groups.h) are grouped, the tied embedding/output among them (the embedding's
  // rows are taken out of their groups), a Q5_0 matrix stays in file layout, and the logits of a
  // prompt (the tiled order), a 3-token batch and decode steps (the vec order) are those of the
  // file layout, every logit (LogitRows::All).
  void rowGroupedWeightsGiveTheFileLayoutsLogits() {
    model::SyntheticModelSpec spec;
    spec.nLayer = 2;
    spec.nEmbd = 512;
    spec.nHead = 8;
    spec.nHeadKv = 4;
    spec.nFf = 1024;
    spec.nVocab = 304;  // whole groups of 8 rows
    spec.weightType = gguf::TensorType::Q4_K;
    spec.embedType = gguf::TensorType::Q4_K;
    spec.tiedOutput = true;
    spec.typeOverrides = {
        {"ffn_down", gguf::TensorType::Q6_K},   {"attn_v", gguf::TensorType::Q5_K},
        {"ffn_up", gguf::TensorType::Q5_K},     {"attn_q", gguf::TensorType::Q4_0},
        {"ffn_gate", gguf::TensorType::Q8_0},   {"attn_k", gguf::TensorType::Q5_0},
        {"attn_output", gguf::TensorType::Q4_1}};
    MappedAndCopied stages(spec, m_dir.filePath("grouped.gguf").toStdString(), 16);
    cpu::CpuStage& stage = stages.copiedStage();
    stage.waitForWeightCopy();
    if (stage.weightUnits() == 0)
      QSKIP("no weight copy on this machine (transparent huge pages off)");
    // Per layer: Q4_1 attn_output, Q5_K attn_v and ffn_up, Q6_K ffn_down, Q4_0 attn_q, Q8_0
    // ffn_gate; and the Q4_K token_embd as output.
    const auto grouping = [](cpu::WeightKind kind) {
      return cpu::kernels().rowGroups[static_cast<int>(kind)];
    };
    const size_t grouped =
        (grouping(cpu::WeightKind::Q4_K) ? 1 : 0) + (grouping(cpu::WeightKind::Q4_1) ? 2 : 0) +
        (grouping(cpu::WeightKind::Q5_K) ? 2 * 2 : 0) + (grouping(cpu::WeightKind::Q6_K) ? 2 : 0) +
        (grouping(cpu::WeightKind::Q4_0) ? 2 : 0) + (grouping(cpu::WeightKind::Q8_0) ? 2 : 0);
    QCOMPARE(stage.weightTensorsInRowGroups(), grouped);
    const std::vector<std::vector<int32_t>> steps = {
        {5, 17, 230, 42, 7, 99, 150, 3, 260, 301, 12, 64}, {8, 9, 10}, {77}, {200}};
    int32_t first = 0;
    for (const auto& tokens : steps) {
      const auto got = forward(*stages.copied, first, tokens, 0, runtime::LogitRows::All);
      const auto want = forward(*stages.mapped, first, tokens, 0, runtime::LogitRows::All);
      QCOMPARE(got.size(), want.size());
      QVERIFY(cpu::test::firstBitDifference(got.data(), want.data(), want.size()) < 0);
      first += static_cast<int32_t>(tokens.size());
    }
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
