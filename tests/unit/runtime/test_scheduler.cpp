// Continuous batching on the CPU backend with the default model: many generations share each
// batch, yet every one of them produces exactly what it produces alone (batch invariance), with
// the same finish rules as Session; slots are admitted, reused, freed on cancellation.

#include <QtTest>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/truncated_model.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/scheduler.h"
#include "engine/runtime/session.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/runtime/failing_stage.h"
#include "tests/unit/runtime/pipelined_stage.h"

using namespace shoal;
using runtime::FinishReason;
using runtime::GenerateOptions;
using runtime::GenerateResult;
using test::FailingStage;
using test::PipelinedStage;

namespace {

struct Outcome {
  GenerateResult result;
  std::string streamed;  // what onText received, concatenated
  std::string error;
  bool finished = false;
};

runtime::SchedulerOptions budget(int32_t rows) {
  runtime::SchedulerOptions o;
  o.tokenBudget = rows;
  return o;
}

GenerateOptions greedy(int32_t maxTokens) {
  GenerateOptions o;
  o.maxTokens = maxTokens;
  o.sampler.temperature = 0;
  return o;
}

}  // namespace

class TestScheduler : public QObject {
  Q_OBJECT

  std::unique_ptr<model::Model> m_model;
  std::unique_ptr<cpu::CpuBackend> m_cpu;

  std::unique_ptr<runtime::Stage> stage(int32_t first, int32_t last, int32_t sequences,
                                        int32_t context, int32_t maxBatch = 64) {
    runtime::StageSpec spec;
    spec.firstLayer = first;
    spec.lastLayer = last;
    spec.hasEmbedding = first == 0;
    spec.hasHead = last == m_model->config().nLayer;
    spec.contextLength = context;
    spec.maxSequences = sequences;
    spec.maxBatch = maxBatch;
    runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    return m_cpu->createStage("cpu0", src, spec);
  }

  std::unique_ptr<runtime::Chain> chain(int32_t sequences, int32_t context = 256,
                                        int32_t maxBatch = 64) {
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(stage(0, m_model->config().nLayer, sequences, context, maxBatch));
    return std::make_unique<runtime::Chain>(std::move(stages));
  }

  std::vector<model::TokenId> chatPrompt(const std::string& user) const {
    const std::string text = "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
    return m_model->tokenizer().encode(text, false, true);
  }

  // The reference: Session::generate alone on a fresh one-slot chain.
  GenerateResult solo(const std::vector<model::TokenId>& prompt, const GenerateOptions& o,
                      int32_t context = 256) {
    auto c = chain(1, context);
    runtime::Session s(*c, m_model->tokenizer());
    return s.generate(prompt, o);
  }

  // The same request alone through a scheduler of the same shape: the reference when prompts are
  // longer than one chunk (Session reads a prompt in pieces of maxBatch rows, the scheduler in
  // chunks of budget - slots + 1).
  GenerateResult alone(const std::vector<model::TokenId>& prompt, const GenerateOptions& o,
                       int32_t sequences, int32_t tokenBudget) {
    auto c = chain(sequences);
    runtime::Scheduler sched(*c, m_model->tokenizer(), budget(tokenBudget));
    Outcome out;
    sched.add(request(prompt, o, out));
    sched.runUntilIdle();
    return out.result;
  }

  static runtime::Scheduler::Request request(const std::vector<model::TokenId>& prompt,
                                             const GenerateOptions& o, Outcome& out) {
    runtime::Scheduler::Request r;
    r.prompt = prompt;
    r.options = o;
    r.onText = [&out](std::string_view piece) {
      out.streamed += piece;
      return true;
    };
    r.onFinish = [&out](const GenerateResult& result, std::string_view error) {
      QVERIFY(!out.finished);  // exactly once
      out.result = result;
      out.error = std::string(error);
      out.finished = true;
    };
    return r;
  }

  static void compareWithSolo(const Outcome& got, const GenerateResult& want) {
    QVERIFY(got.finished);
    QVERIFY2(got.error.empty(), got.error.c_str());
    QCOMPARE(got.result.tokens, want.tokens);
    QCOMPARE(got.result.text, want.text);
    QCOMPARE(got.streamed, want.text);
    QCOMPARE(got.result.finish, want.finish);
    QCOMPARE(got.result.promptTokens, want.promptTokens);
  }

  // Four greedy replies over `c`, whose stage `lostStage` fails once ("stage lost"): the
  // recovery hook empties every slot (as a re-plan onto fresh stages does), and each reply equals
  // its solo run after one recovery.
  void fourRepliesAcrossALostStage(runtime::Chain& c, size_t lostStage) {
    int recoveries = 0;
    runtime::SchedulerOptions o;
    o.recovery = [&](const std::exception& e, size_t failedStage) {
      if (std::string_view(e.what()) != "stage lost" || failedStage != lostStage) return false;
      ++recoveries;
      for (int32_t s = 0; s < 4; ++s) c.truncate(s, 0);
      return true;
    };
    runtime::Scheduler sched(c, m_model->tokenizer(), o);
    std::vector<Outcome> got(4);
    std::vector<GenerateResult> want;
    for (size_t i = 0; i < got.size(); ++i) {
      const auto p = chatPrompt(m_questions[i + 2]);
      want.push_back(solo(p, greedy(16)));
      sched.add(request(p, greedy(16), got[i]));
    }
    sched.runUntilIdle();
    QCOMPARE(recoveries, 1);
    for (size_t i = 0; i < got.size(); ++i) {
      compareWithSolo(got[i], want[i]);
      QCOMPARE(got[i].result.recoveries, 1);
    }
  }

  const std::vector<std::string> m_questions = {
      "What is the capital of France?",
      "Write a haiku about the sea.",
      "List three prime numbers.",
      "Explain what a GPU is in one sentence.",
      "Hi",
      "Translate 'good morning' into Spanish, and explain when people say it.",
      "What is 12 times 7?",
      "Name a famous painter.",
  };

 private slots:
  void initTestCase() {
    const auto path = std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) QSKIP("default model absent (run scripts/setup)");
    m_model = model::Model::load(path);
    m_cpu = std::make_unique<cpu::CpuBackend>(2);
  }

  // The promise: 8 concurrent greedy requests, some arriving while others decode, prompts read
  // in chunks that share batches with other sequences' decode rows — each reply byte for byte
  // what it is alone.
  void eightConcurrentRepliesEqualTheirSoloRuns() {
    const size_t n = m_questions.size();
    std::vector<std::vector<model::TokenId>> prompts;
    std::vector<GenerateResult> want;
    for (size_t i = 0; i < n; ++i) {
      prompts.push_back(chatPrompt(m_questions[i]));
      want.push_back(alone(prompts[i], greedy(24 + static_cast<int32_t>(i)), 8, 16));
    }
    auto c = chain(8);
    // A budget of 16 rows: prompts (15-30 tokens) are cut into chunks of 9 and mixed with
    // decodes.
    runtime::Scheduler sched(*c, m_model->tokenizer(), budget(16));
    QCOMPARE(sched.slotCount(), size_t{8});
    std::vector<Outcome> got(n);
    for (size_t i = 0; i < n / 2; ++i) {
      sched.add(request(prompts[i], greedy(24 + static_cast<int32_t>(i)), got[i]));
    }
    for (int k = 0; k < 5; ++k) QVERIFY(sched.step());
    for (size_t i = n / 2; i < n; ++i) {
      sched.add(request(prompts[i], greedy(24 + static_cast<int32_t>(i)), got[i]));
    }
    QCOMPARE(sched.stats().waiting, n - n / 2);
    sched.runUntilIdle();
    for (size_t i = 0; i < n; ++i) compareWithSolo(got[i], want[i]);
    const runtime::SchedulerStats st = sched.stats();
    QCOMPARE(st.completed, uint64_t{n});
    QCOMPARE(st.active, size_t{0});
    // Batched for real: far fewer steps than rows.
    QVERIFY2(st.rowsRun > 3 * st.steps,
             qPrintable(QString("%1 rows in %2 steps").arg(st.rowsRun).arg(st.steps)));
  }

  // Finish rules are Session's: stop strings, end of generation, the context filling up, and
  // seeded sampling (the sampler draws per sequence, so a batch does not change the draws): with a
  // repetition penalty from the generation's own stream of numbers, without one by position
  // (drawsByPosition).
  void finishRulesAndSamplingMatchSession() {
    const auto p0 = chatPrompt(m_questions[0]);
    const auto p1 = chatPrompt(m_questions[3]);
    const auto p2 = chatPrompt(m_questions[5]);
    const GenerateResult free0 = solo(p0, greedy(40));
    QVERIFY(free0.text.size() > 8);
    GenerateOptions stop = greedy(40);
    stop.stop = {free0.text.substr(free0.text.size() / 2, 3)};
    GenerateOptions sampled;
    sampled.maxTokens = 30;
    sampled.sampler.temperature = 0.9f;
    sampled.sampler.seed = 1234;
    sampled.sampler.repeatPenalty = 1.1f;
    GenerateOptions eog = greedy(200);  // a short question: the model ends its reply itself
    GenerateOptions byPosition = sampled;
    byPosition.sampler.repeatPenalty = 1.0f;
    byPosition.sampler.topK = 0;
    byPosition.sampler.seed = 77;

    const int32_t ctx = 64;  // p2 + its reply overrun this context
    const std::vector<std::pair<std::vector<model::TokenId>, GenerateOptions>> cases = {
        {p0, stop}, {p1, sampled}, {p0, eog}, {p2, greedy(200)}, {p1, byPosition}};
    std::vector<GenerateResult> want;
    for (const auto& [p, o] : cases) want.push_back(solo(p, o, ctx));
    QCOMPARE(want[0].finish, FinishReason::StopString);
    QCOMPARE(want[2].finish, FinishReason::EndOfGeneration);
    QCOMPARE(want[3].finish, FinishReason::ContextFull);

    auto c = chain(4, ctx);
    runtime::Scheduler sched(*c, m_model->tokenizer(), budget(8));
    std::vector<Outcome> got(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      sched.add(request(cases[i].first, cases[i].second, got[i]));
    }
    sched.runUntilIdle();
    for (size_t i = 0; i < cases.size(); ++i) compareWithSolo(got[i], want[i]);
  }

  // More requests than slots: the rest wait (never more active than slots), and each still
  // equals its solo run.
  void requestsBeyondTheSlotsWaitTheirTurn() {
    auto c = chain(3);
    runtime::Scheduler sched(*c, m_model->tokenizer());
    std::vector<Outcome> got(6);
    std::vector<GenerateResult> want;
    for (size_t i = 0; i < got.size(); ++i) {
      const auto p = chatPrompt(m_questions[i]);
      want.push_back(solo(p, greedy(12)));
      sched.add(request(p, greedy(12), got[i]));
    }
    size_t mostActive = 0;
    while (sched.step()) mostActive = std::max(mostActive, sched.stats().active);
    QCOMPARE(mostActive, size_t{3});
    for (size_t i = 0; i < got.size(); ++i) compareWithSolo(got[i], want[i]);
  }

  // Cancelling a running generation frees its slot at the next step for the one waiting.
  void cancellationFreesTheSlotAtOnce() {
    auto c = chain(1);
    runtime::Scheduler sched(*c, m_model->tokenizer());
    Outcome first, second, never;
    const auto p1 = chatPrompt(m_questions[2]);
    const auto id = sched.add(request(chatPrompt(m_questions[1]), greedy(100), first));
    sched.add(request(p1, greedy(10), second));
    const auto idNever = sched.add(request(chatPrompt(m_questions[4]), greedy(10), never));
    for (int k = 0; k < 4; ++k) QVERIFY(sched.step());
    QCOMPARE(sched.stats().waiting, size_t{2});
    sched.cancel(id);
    sched.cancel(idNever);
    QVERIFY(sched.step());
    QVERIFY(first.finished);
    QCOMPARE(first.result.finish, FinishReason::Cancelled);
    QVERIFY(first.result.tokens.size() >= 3 && first.result.tokens.size() <= 4);
    QVERIFY(never.finished);
    QCOMPARE(never.result.finish, FinishReason::Cancelled);
    QCOMPARE(sched.stats().active, size_t{1});  // the second one took the slot
    sched.runUntilIdle();
    compareWithSolo(second, solo(p1, greedy(10)));
    QCOMPARE(sched.stats().cancelled, uint64_t{2});
  }

  // A follow-up turn that extends the previous prompt and reply reuses that slot's cache.
  void aSharedPrefixIsNotComputedAgain() {
    auto c = chain(2);
    runtime::Scheduler sched(*c, m_model->tokenizer());
    const auto p = chatPrompt(m_questions[0]);
    Outcome turn1, other, turn2;
    sched.add(request(p, greedy(16), turn1));
    sched.add(request(chatPrompt(m_questions[6]), greedy(16), other));
    sched.runUntilIdle();
    QCOMPARE(turn1.result.reusedTokens, 0);
    std::vector<model::TokenId> next = p;
    next.insert(next.end(), turn1.result.tokens.begin(), turn1.result.tokens.end());
    const auto more = m_model->tokenizer().encode(
        "\n<|im_start|>user\nAnd of Spain?<|im_end|>\n"
        "<|im_start|>assistant\n",
        false, true);
    next.insert(next.end(), more.begin(), more.end());
    sched.add(request(next, greedy(16), turn2));
    sched.runUntilIdle();
    // Every token the first turn fed back is cached (the last sampled one never was).
    QCOMPARE(turn2.result.reusedTokens,
             static_cast<int32_t>(p.size() + turn1.result.tokens.size() - 1));
    compareWithSolo(turn2, solo(next, greedy(16)));
  }

  void requestsThatCanNeverRunAreRefused() {
    auto c = chain(1, 32);
    runtime::Scheduler sched(*c, m_model->tokenizer());
    Outcome o;
    QVERIFY_THROWS_EXCEPTION(Error, sched.add(request({}, greedy(4), o)));
    QVERIFY_THROWS_EXCEPTION(Error,
                             sched.add(request(std::vector<model::TokenId>(32, 1), greedy(4), o)));
    QVERIFY_THROWS_EXCEPTION(Error, sched.add(request({1, -3}, greedy(4), o)));
    QVERIFY_THROWS_EXCEPTION(Error,
                             sched.add(request({1, m_model->tokenizer().size()}, greedy(4), o)));
    GenerateOptions bad = greedy(4);
    bad.sampler.repeatPenalty = 0;
    QVERIFY_THROWS_EXCEPTION(Error, sched.add(request({1, 2}, bad, o)));
    QVERIFY(sched.idle());
    QVERIFY(!sched.step());
  }

  // A callback that returns false stops its generation only.
  void aReaderThatStopsEndsOnlyItsOwnReply() {
    auto c = chain(2);
    runtime::Scheduler sched(*c, m_model->tokenizer());
    const auto p = chatPrompt(m_questions[3]);
    Outcome stopper, other;
    auto r = request(chatPrompt(m_questions[1]), greedy(40), stopper);
    int pieces = 0;
    r.onText = [&](std::string_view piece) {
      stopper.streamed += piece;
      return ++pieces < 3;
    };
    sched.add(std::move(r));
    sched.add(request(p, greedy(20), other));
    sched.runUntilIdle();
    QCOMPARE(stopper.result.finish, FinishReason::Cancelled);
    QCOMPARE(pieces, 3);
    compareWithSolo(other, solo(p, greedy(20)));
  }

  // Three stages, as a pool's nodes: each step's sequences go through in three batches at once
  // (a wavefront), and each reply still equals its solo run.
  void threeStagesRunThreeBatchesInFlight() {
    const int32_t layers = m_model->config().nLayer;
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(stage(0, 9, 6, 256));
    stages.push_back(stage(9, 21, 6, 256));
    stages.push_back(stage(21, layers, 6, 256));
    runtime::Chain c(std::move(stages));
    runtime::Scheduler sched(c, m_model->tokenizer(), budget(24));
    std::vector<Outcome> got(6);
    std::vector<GenerateResult> want;
    for (size_t i = 0; i < got.size(); ++i) {
      const auto p = chatPrompt(m_questions[i]);
      want.push_back(solo(p, greedy(14)));
      sched.add(request(p, greedy(14), got[i]));
    }
    sched.runUntilIdle();
    for (size_t i = 0; i < got.size(); ++i) compareWithSolo(got[i], want[i]);
  }

  // Nodes linked directly (a stage that keeps 3 batches in flight on its own): the scheduler
  // refills the pipeline as each batch comes back — several batches out at once, never
  // drained by a step — and admits late requests only when nothing is in flight (a truncate
  // would lose the batches out). Replies, speculative ones too, equal their solo runs; a
  // sequence cancelled while its batch is out ends when the batch is back.
  void linkedNodesKeepThePipelineFullWithoutDraining() {
    auto pipelined =
        std::make_unique<PipelinedStage>(stage(0, m_model->config().nLayer, 8, 256), 3);
    PipelinedStage* node = pipelined.get();
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(std::move(pipelined));
    runtime::Chain c(std::move(stages));
    QCOMPARE(c.asyncDepth(), size_t{3});
    runtime::Scheduler sched(c, m_model->tokenizer(), budget(24));
    const size_t n = m_questions.size();
    std::vector<Outcome> got(n + 1);
    std::vector<GenerateResult> want;
    GenerateOptions speculative = greedy(20);
    speculative.lookup.maxDraft = 4;
    speculative.lookup.adaptive = false;
    for (size_t i = 0; i < n; ++i) {
      const auto p = chatPrompt(m_questions[i]);
      want.push_back(solo(p, greedy(20)));
      sched.add(request(p, i % 2 ? speculative : greedy(20), got[i]));
      if (i == 4) {  // the rest arrive while the first ones are in flight
        for (int k = 0; k < 6; ++k) QVERIFY(sched.step());
      }
    }
    const auto cancelled = sched.add(request(chatPrompt(m_questions[0]), greedy(200), got[n]));
    while (sched.step()) {
      if (!got[n].streamed.empty()) sched.cancel(cancelled);  // once it has begun its reply
    }
    for (size_t i = 0; i < n; ++i) compareWithSolo(got[i], want[i]);
    QVERIFY(got[n].finished);
    QCOMPARE(got[n].result.finish, FinishReason::Cancelled);
    QCOMPARE(node->mostInFlight(), size_t{3});
    QCOMPARE(node->truncatesInFlight(), 0);
    QCOMPARE(sched.stats().completed, uint64_t{n});
  }

  // A linked pool that loses a node with batches in flight: every batch out is abandoned, the
  // recovery repairs the chain, and each generation replays its own tokens: replies unchanged.
  void aLinkedPoolLostWithBatchesInFlightIsRecovered() {
    auto pipelined =
        std::make_unique<PipelinedStage>(stage(0, m_model->config().nLayer, 4, 256), 3, 14);
    PipelinedStage* node = pipelined.get();
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(std::move(pipelined));
    runtime::Chain c(std::move(stages));
    fourRepliesAcrossALostStage(c, 0);
    QVERIFY(node->failed());
    QVERIFY(node->lostInFlight() > 0);
  }

  // A stage fails mid-reply with 4 generations in flight; the recovery hook repairs the chain
  // (here: empties every slot, as a re-plan onto fresh stages does) and every generation reads
  // its prompt and reply so far again: each reply equals its solo run.
  void aStageLostMidReplyIsRecoveredForEveryGeneration() {
    const int32_t layers = m_model->config().nLayer;
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(stage(0, 15, 4, 256));
    auto failing = std::make_unique<FailingStage>(stage(15, layers, 4, 256), 12);
    FailingStage* middle = failing.get();
    stages.push_back(std::move(failing));
    runtime::Chain c(std::move(stages));
    fourRepliesAcrossALostStage(c, 1);
    QVERIFY(middle->failed());
  }

  // Speculative decoding in the scheduler: replies that quote their prompts, drafted by prompt
  // lookup and verified in decode order alongside other sequences' rows, equal their plain solo
  // runs byte for byte — in one step of several stages too, and across a lost stage (the kept
  // rows replay as one-row pieces).
  void speculativeRepliesEqualTheirPlainSoloRuns() {
    const std::vector<std::string> quotes = {
        "Repeat exactly: red, green and blue; one, two, three, four, five.",
        "Repeat exactly: apples, pears and plums; north, south, east and west.",
        "Repeat exactly: Monday, Tuesday, Wednesday, Thursday, Friday.",
        "Repeat exactly: the quick brown fox jumps over the lazy dog."};
    std::vector<std::vector<model::TokenId>> prompts;
    std::vector<GenerateResult> want;
    for (const std::string& q : quotes) {
      prompts.push_back(chatPrompt(q));
      want.push_back(solo(prompts.back(), greedy(40)));
    }
    GenerateOptions speculative = greedy(40);
    speculative.lookup.maxDraft = 6;
    speculative.lookup.adaptive = false;
    for (const int failAt : {0, 9}) {
      const int32_t layers = m_model->config().nLayer;
      std::vector<std::unique_ptr<runtime::Stage>> stages;
      stages.push_back(stage(0, 15, 4, 256));
      stages.push_back(
          std::make_unique<FailingStage>(stage(15, layers, 4, 256), failAt ? failAt : 1 << 30));
      runtime::Chain c(std::move(stages));
      runtime::SchedulerOptions o;
      o.tokenBudget = 40;
      o.recovery = [&](const std::exception&, size_t) {
        for (int32_t s = 0; s < 4; ++s) c.truncate(s, 0);
        return true;
      };
      runtime::Scheduler sched(c, m_model->tokenizer(), o);
      std::vector<Outcome> got(quotes.size());
      for (size_t i = 0; i < got.size(); ++i) sched.add(request(prompts[i], speculative, got[i]));
      sched.runUntilIdle();
      int accepted = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        compareWithSolo(got[i], want[i]);
        accepted += got[i].result.acceptedTokens;
        QCOMPARE(got[i].result.recoveries, failAt ? 1 : 0);
      }
      QVERIFY2(accepted > 0, "no draft was ever confirmed");
    }
  }

  // A draft model drafts for the sequences that prompt lookup has nothing for, each in its own
  // slot of the draft model's chain: replies equal their plain solo runs, over a local chain
  // (wavefront steps) and over nodes linked directly (pipelined steps), whether the draft model
  // is the target itself (its drafts confirmed) or the target cut to 12 layers (mostly refused).
  void draftModelRepliesEqualTheirPlainSoloRuns() {
    QTemporaryDir dir;
    const auto truncatedPath = std::filesystem::path(dir.path().toStdString()) / "draft12.gguf";
    model::writeTruncatedModel(m_model->path(), 12, truncatedPath);
    const auto truncated = model::Model::load(truncatedPath);
    std::vector<std::vector<model::TokenId>> prompts;
    std::vector<GenerateResult> want;
    for (size_t i = 0; i < 4; ++i) {
      prompts.push_back(chatPrompt(m_questions[i + 1]));
      want.push_back(solo(prompts.back(), greedy(20)));
    }
    GenerateOptions speculative = greedy(20);
    speculative.lookup.maxDraft = 4;
    speculative.lookup.adaptive = false;
    for (const model::Model* draftModel : {m_model.get(), truncated.get()}) {
      for (const bool linked : {false, true}) {
        runtime::StageSpec spec;
        spec.lastLayer = draftModel->config().nLayer;
        spec.hasEmbedding = spec.hasHead = true;
        spec.contextLength = 256;
        spec.maxSequences = 4;
        const runtime::ModelSource src{&draftModel->file(), &draftModel->config(),
                                       &draftModel->weights()};
        std::vector<std::unique_ptr<runtime::Stage>> draftStages;
        draftStages.push_back(m_cpu->createStage("cpu0", src, spec));
        runtime::Chain draftChain(std::move(draftStages));
        runtime::ModelDrafter drafter(draftChain);
        QCOMPARE(drafter.slotCount(), 4);

        std::vector<std::unique_ptr<runtime::Stage>> stages;
        auto target = stage(0, m_model->config().nLayer, 4, 256);
        stages.push_back(linked ? std::make_unique<PipelinedStage>(std::move(target), 3)
                                : std::move(target));
        runtime::Chain c(std::move(stages));
        runtime::SchedulerOptions o = budget(32);
        o.drafter = &drafter;
        runtime::Scheduler sched(c, m_model->tokenizer(), o);
        std::vector<Outcome> got(prompts.size());
        for (size_t i = 0; i < got.size(); ++i) sched.add(request(prompts[i], speculative, got[i]));
        sched.runUntilIdle();
        int drafted = 0, accepted = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          compareWithSolo(got[i], want[i]);
          drafted += got[i].result.modelDraftedTokens;
          accepted += got[i].result.modelAcceptedTokens;
        }
        QVERIFY2(drafted > 0, "the draft model drafted nothing");
        if (draftModel == m_model.get()) {
          QVERIFY2(accepted * 10 >= drafted * 9,
                   qPrintable(QString("%1 of %2 confirmed").arg(accepted).arg(drafted)));
        } else {
          QVERIFY(accepted < drafted);
        }
      }
    }
  }

  // A stage lost between two requests fails the next admission's truncate first: recovered the
  // same way, and the new request's reply is its solo run.
  void aStageLostBetweenRequestsIsRecoveredAtAdmission() {
    const int32_t layers = m_model->config().nLayer;
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(stage(0, 15, 2, 256));
    auto failing = std::make_unique<FailingStage>(stage(15, layers, 2, 256), 1 << 30);
    FailingStage* second = failing.get();
    stages.push_back(std::move(failing));
    runtime::Chain c(std::move(stages));
    int recoveries = 0;
    runtime::SchedulerOptions o;
    o.recovery = [&](const std::exception&, size_t) {
      ++recoveries;
      for (int32_t s = 0; s < 2; ++s) c.truncate(s, 0);
      return true;
    };
    runtime::Scheduler sched(c, m_model->tokenizer(), o);
    Outcome first, next;
    sched.add(request(chatPrompt(m_questions[0]), greedy(8), first));
    sched.runUntilIdle();
    QVERIFY(first.error.empty());
    second->failNextTruncate();
    const auto p = chatPrompt(m_questions[1]);
    sched.add(request(p, greedy(12), next));
    sched.runUntilIdle();
    QCOMPARE(recoveries, 1);
    compareWithSolo(next, solo(p, greedy(12)));
  }

  // Without a hook (or when it gives up) the generations of the failed step end with the error.
  void aStageLostWithoutRecoveryEndsTheStepsGenerations() {
    const int32_t layers = m_model->config().nLayer;
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(stage(0, 15, 2, 256));
    stages.push_back(std::make_unique<FailingStage>(stage(15, layers, 2, 256), 5));
    runtime::Chain c(std::move(stages));
    runtime::Scheduler sched(c, m_model->tokenizer());
    std::vector<Outcome> got(2);
    for (size_t i = 0; i < got.size(); ++i) {
      sched.add(request(chatPrompt(m_questions[i]), greedy(16), got[i]));
    }
    sched.runUntilIdle();
    for (const Outcome& o : got) {
      QVERIFY(o.finished);
      QCOMPARE(o.error, std::string("stage lost"));
    }
    QCOMPARE(sched.stats().failed, uint64_t{2});
  }

  void cancelAllEndsEverything() {
    auto c = chain(1);
    runtime::Scheduler sched(*c, m_model->tokenizer());
    Outcome a, b;
    sched.add(request(chatPrompt(m_questions[0]), greedy(50), a));
    sched.add(request(chatPrompt(m_questions[1]), greedy(50), b));
    QVERIFY(sched.step());
    sched.cancelAll();
    QVERIFY(a.finished && b.finished);
    QCOMPARE(a.result.finish, FinishReason::Cancelled);
    QCOMPARE(b.result.finish, FinishReason::Cancelled);
    QVERIFY(sched.idle());
  }
};

QTEST_GUILESS_MAIN(TestScheduler)
#include "test_scheduler.moc"
