// shoal-cli bench: prompt-processing and generation speed, as JSON, the way llama-bench measures
// them: ppN = one batch of N tokens into an empty cache; tgN = N single-token steps from an
// empty cache; with --depth D (llama-bench's -d) both start after D cached positions instead
// (filled once, in batches, before the timed runs; the tests are named "ppN@dD", "tgN@dD").
// Token ids are random (seeded), so the text does not matter. Each test runs once to
// warm up, then `reps` times; the JSON reports the median and every repetition. load_s is the
// model's load; settle_s the background work the stages did after it (measured before the tests).
// With --sequences S (llama-batched-bench's S_TG), tgN decodes S sequences at once: each step is
// one batch of S one-token rows, one per sequence (what a server's decode step with S requests
// runs), and tokens/s counts all S x N tokens.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "app/cli/cli_support.h"
#include "app/cli/commands.h"

namespace shoal::cli {
namespace {

struct BenchOptions {
  ModelOptions model;
  int promptTokens = 128;
  int genTokens = 64;
  int reps = 5;
  int depth = 0;         // --depth: positions cached before each test
  int sequences = 1;     // --sequences: sequences decoding together in tgN
  bool profile = false;  // --profile: per-kernel GPU time of a generation run
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The device the model runs on: --device, or the backend's first (best) one.
std::string deviceName(const LoadedModel& lm, const ModelOptions& o) {
  for (const runtime::DeviceInfo& d : lm.backend->devices()) {
    if (o.device.empty() || d.id == o.device) return d.name;
  }
  return o.device;
}

void runBench(BenchOptions o) {
  if (o.model.contextLength == 0) {
    o.model.contextLength = o.depth + std::max(o.promptTokens, o.genTokens) + 1;
  }
  o.model.sequences = o.sequences;
  LoadedModel lm = loadModel(o.model);
  runtime::Chain& chain = *lm.chain;
  if (o.profile) {
    bool any = false;
    for (size_t s = 0; s < chain.stageCount(); ++s) {
      any = chain.stage(s).setProfiling(true) || any;
      chain.stage(s).setProfiling(false);
    }
    if (!any) {
      throw CliExit{2,
                    "--profile needs a GPU stage whose device has timestamps (--backend vulkan)"};
    }
  }
  // Like llama-bench, measure after the load, and so after the work a stage does in the
  // background once built (the CPU stage's weight copy); its time is reported apart, since a
  // user's first tokens run alongside it (their time to first token: the load alone).
  const auto settleStart = std::chrono::steady_clock::now();
  for (size_t s = 0; s < chain.stageCount(); ++s) chain.stage(s).settle();
  const double settleSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - settleStart).count();
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tokenDist(0, lm.model->config().nVocab - 1);
  std::vector<float> logits;
  using Clock = std::chrono::steady_clock;

  // The first `depth` positions cached (kept from the last test where the stages can resume
  // there, refilled where they cannot: a sliding-window ring that the test ran past).
  std::vector<int32_t> prefix(static_cast<size_t>(o.depth));
  for (auto& t : prefix) t = tokenDist(rng);
  auto toDepth = [&] {
    if (o.depth > 0 && chain.truncate(0, o.depth) == o.depth) return;
    chain.truncate(0, 0);
    if (o.depth > 0) chain.forward(0, 0, prefix, logits);  // in micro-batches of maxBatch
  };
  auto timePrompt = [&]() {
    std::vector<int32_t> tokens(static_cast<size_t>(o.promptTokens));
    for (auto& t : tokens) t = tokenDist(rng);
    toDepth();
    const auto t0 = Clock::now();
    chain.forward(0, o.depth, tokens, logits);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  auto timeGenerate = [&]() {
    toDepth();
    int32_t token = tokenDist(rng);
    const auto t0 = Clock::now();
    for (int i = 0; i < o.genTokens; ++i) {
      chain.forward(0, o.depth + i, std::span(&token, 1), logits);
      token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // --sequences S: sequence 0 and S - 1 more, each at the same depth (its own copy of the
  // prefix), decoding one token per step in one batch.
  runtime::StageOutput stepOut;
  auto timeGenerateBatch = [&]() {
    toDepth();
    for (int32_t s = 1; s < o.sequences; ++s) {
      chain.truncate(s, 0);
      if (o.depth > 0) chain.forward(s, 0, prefix, logits);
    }
    std::vector<int32_t> tokens(static_cast<size_t>(o.sequences));
    for (auto& t : tokens) t = tokenDist(rng);
    std::vector<runtime::Segment> segments(tokens.size());
    for (size_t s = 0; s < segments.size(); ++s) {
      segments[s] = {static_cast<int32_t>(s), o.depth, 1, runtime::LogitRows::Last};
    }
    const runtime::SampleRequest greedy;
    const auto t0 = Clock::now();
    for (int i = 0; i < o.genTokens; ++i) {
      for (runtime::Segment& seg : segments) seg.firstPosition = o.depth + i;
      chain.forwardBatch({tokens, {}, segments, &greedy}, stepOut);
      const size_t vocab = static_cast<size_t>(lm.model->config().nVocab);
      for (size_t s = 0; s < tokens.size(); ++s) {
        if (!stepOut.tokens.empty()) {
          tokens[s] = stepOut.tokens[s];
        } else {
          const float* row = stepOut.logits.data() + s * vocab;
          tokens[s] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
        }
      }
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };

  nlohmann::json results = nlohmann::json::array();
  auto run = [&](const std::string& name, int tokens, auto&& timer) {
    if (tokens <= 0) return;
    timer();  // warm-up
    std::vector<double> rates;
    const int perRun = name == "tg" ? tokens * o.sequences : tokens;
    for (int r = 0; r < o.reps; ++r) rates.push_back(perRun / timer());
    const std::string at = o.depth > 0 ? "@d" + std::to_string(o.depth) : "";
    const std::string by = name == "tg" && o.sequences > 1 ? "x" + std::to_string(o.sequences) : "";
    results.push_back({{"test", name + std::to_string(tokens) + by + at},
                       {"depth", o.depth},
                       {"tokens", tokens},
                       {"sequences", name == "tg" ? o.sequences : 1},
                       {"tokens_per_s_median", median(rates)},
                       {"tokens_per_s", rates}});
  };
  run("pp", o.promptTokens, timePrompt);
  if (o.sequences > 1) {
    run("tg", o.genTokens, timeGenerateBatch);
  } else {
    run("tg", o.genTokens, timeGenerate);
  }

  // --profile: one more run of each test with every kernel timed on the device (apart from the
  // timed runs: timestamps cost a little), by kernel, per token; and the weight bytes the kernels
  // read per token against what a decoded token must read (each matrix once).
  auto profileRun = [&](int tokens, auto&& timer) {
    for (size_t s = 0; s < chain.stageCount(); ++s) chain.stage(s).setProfiling(true);
    timer();
    std::map<std::string, runtime::KernelProfile> byKernel;
    uint64_t expected = 0;
    for (size_t s = 0; s < chain.stageCount(); ++s) {
      for (const runtime::KernelProfile& k : chain.stage(s).profile()) {
        runtime::KernelProfile& sum = byKernel[k.kernel];
        sum.kernel = k.kernel;
        sum.dispatches += k.dispatches;
        sum.seconds += k.seconds;
        sum.weightBytes += k.weightBytes;
      }
      expected += chain.stage(s).decodeWeightBytes();
      chain.stage(s).setProfiling(false);
    }
    std::vector<runtime::KernelProfile> kernels;
    double seconds = 0;
    uint64_t weightBytes = 0;
    for (const auto& [name, k] : byKernel) {
      kernels.push_back(k);
      seconds += k.seconds;
      weightBytes += k.weightBytes;
    }
    std::sort(kernels.begin(), kernels.end(),
              [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    nlohmann::json rows = nlohmann::json::array();
    for (const runtime::KernelProfile& k : kernels) {
      rows.push_back({{"kernel", k.kernel},
                      {"dispatches_per_token", double(k.dispatches) / tokens},
                      {"us_per_token", k.seconds * 1e6 / tokens},
                      {"share", seconds > 0 ? k.seconds / seconds : 0.0},
                      {"weight_bytes_per_token", double(k.weightBytes) / tokens}});
    }
    return nlohmann::json{
        {"tokens", tokens},
        {"gpu_us_per_token", seconds * 1e6 / tokens},
        {"weight_bytes_per_token", double(weightBytes) / tokens},
        {"decode_weight_bytes", expected},
        {"weight_read_ratio", expected > 0 ? double(weightBytes) / tokens / expected : 0.0},
        {"kernels", rows}};
  };
  nlohmann::json profile, promptProfile;
  if (o.profile) {
    if (o.promptTokens > 0) promptProfile = profileRun(o.promptTokens, timePrompt);
    if (o.genTokens > 0) profile = profileRun(o.genTokens, timeGenerate);
  }

  const auto& c = lm.model->config();
  const HugePageBytes huge = hugePageBytes();
  nlohmann::json out = {{"model", lm.model->path().filename().string()},
                        {"architecture", c.architecture},
                        {"backend", lm.backend->name()},
                        {"device", deviceName(lm, o.model)},
                        {"threads", o.model.threads},
                        {"context", chain.contextLength()},
                        {"repetitions", o.reps},
                        {"load_s", lm.loadSeconds},
                        {"settle_s", settleSeconds},
                        {"peak_rss_bytes", peakRssBytes()},
                        {"anon_huge_page_bytes", huge.anonymous},
                        {"file_pmd_mapped_bytes", huge.filePmdMapped},
                        {"results", results}};
  if (o.profile) {
    out["profile"] = profile;               // the generation run (tg)
    out["profile_prompt"] = promptProfile;  // the prompt run (pp)
  }
  std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace

void registerBenchCommand(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prompt and generation tokens/s (JSON)");
  addModelOptions(*cmd, o->model);
  cmd->add_option("-p,--n-prompt", o->promptTokens, "prompt tokens (0: skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("-n,--n-gen", o->genTokens, "generated tokens (0: skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("-r,--reps", o->reps, "repetitions")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("-d,--depth", o->depth, "positions cached before each test (llama-bench's -d)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--sequences", o->sequences,
                  "sequences decoding together in the generation test, one batch of one token each "
                  "per step (tokens/s counts them all)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--profile", o->profile,
                "also time every GPU kernel of a generation run and of a prompt run (JSON "
                "\"profile\", \"profile_prompt\")");
  cmd->callback([o] { runBench(*o); });
}

}  // namespace shoal::cli
