#pragma once
// What the node-protocol tests (test_node_host, test_node_processes) and bench/hop_overhead
// share: greedy decoding through one local stage (the reference) and through a split of
// RemoteStages relayed by the caller, the split's deployment, and raw requests on a connection
// (for requests NodeClient would never send: a stream with tampered tensors).

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/model.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/sampler.h"
#include "kernels/cpu/cpu_backend.h"
#include "lan/pool/linked_stages.h"
#include "lan/pool/node_client.h"
#include "lan/pool/remote_stage.h"
#include "lan/pool/sha256.h"
#include "lan/transport/connection.h"

namespace shoal::lan::test {

// `tokens` generated greedily (tokens[0] is sampled after the prompt); stepMs: the wall time of
// each later single-token step (forward + sample), tokens.size() - 1 of them; stepCpuMs (local
// runs only): the process CPU time of the same steps (wall >> CPU: the step waited for a core).
struct GreedyRun {
  std::vector<int32_t> tokens;
  std::vector<double> stepMs;
  std::vector<double> stepCpuMs;
};

// One batch of sequence 0 through `stage`: token ids (embedding stage) or hidden states (rows x
// nEmbd), at `firstPosition`; the logits of the last row on a head.
inline void forwardRows(runtime::Stage& stage, std::span<const int32_t> tokens,
                        std::span<const float> hidden, int32_t rows, int32_t firstPosition,
                        runtime::StageOutput& out) {
  const runtime::Segment segment{0, firstPosition, rows, runtime::LogitRows::Last};
  runtime::Batch batch;
  batch.tokens = tokens;
  batch.hidden = hidden;
  batch.segments = std::span(&segment, 1);
  stage.forward(batch, out);
}
inline void forwardTokens(runtime::Stage& stage, std::span<const int32_t> tokens,
                          int32_t firstPosition, runtime::StageOutput& out) {
  forwardRows(stage, tokens, {}, static_cast<int32_t>(tokens.size()), firstPosition, out);
}
// One hidden state (nEmbd values) at `firstPosition`.
inline void forwardHidden(runtime::Stage& stage, std::span<const float> hidden,
                          int32_t firstPosition, runtime::StageOutput& out) {
  forwardRows(stage, {}, hidden, 1, firstPosition, out);
}

// Greedy decoding on one stage holding the whole model; its KV cache is reset first, so the
// stage can be reused run after run (as a node's is).
inline GreedyRun localGreedy(runtime::Stage& stage, std::span<const int32_t> prompt, int steps) {
  using Clock = std::chrono::steady_clock;
  const auto cpuMs = [] { return 1000.0 * static_cast<double>(std::clock()) / CLOCKS_PER_SEC; };
  stage.truncate(0, 0);
  runtime::SamplerParams greedy;
  greedy.temperature = 0;
  runtime::Sampler sampler(greedy);
  runtime::StageOutput out;
  forwardTokens(stage, prompt, 0, out);
  GreedyRun run;
  run.tokens.push_back(sampler.sample(out.logits));
  auto pos = static_cast<int32_t>(prompt.size());
  for (int i = 1; i < steps; ++i) {
    const auto t0 = Clock::now();
    const double c0 = cpuMs();
    const int32_t one[1] = {run.tokens.back()};
    forwardTokens(stage, one, pos++, out);
    run.tokens.push_back(sampler.sample(out.logits));
    run.stepCpuMs.push_back(cpuMs() - c0);
    run.stepMs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return run;
}

// A CPU stage with the whole model, `threads` threads (the backend lives as long as the stage
// needs it: its thread pool is shared with the stage).
inline std::unique_ptr<runtime::Stage> localStage(const model::Model& m, int threads,
                                                  int32_t contextLength = 512) {
  cpu::CpuBackend cpu(threads);
  runtime::StageSpec spec;
  spec.lastLayer = m.config().nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength = contextLength;
  const runtime::ModelSource src{&m.file(), &m.config(), &m.weights()};
  return cpu.createStage("cpu0", src, spec);
}

// The reference: a fresh CPU stage with the whole model, `threads` threads.
inline GreedyRun localGreedy(const model::Model& m, std::span<const int32_t> prompt, int steps,
                             int threads, int32_t contextLength = 512) {
  const auto stage = localStage(m, threads, contextLength);
  return localGreedy(*stage, prompt, steps);
}

// The same through remote stages, as the coordinator runs a pool: a Chain of them (hidden
// states node to node through the caller), the last node sampling greedily. linked: the nodes
// were linked (link_accept/link_connect) and forward to each other directly, one LinkedStages.
// The KV caches are reset first.
inline GreedyRun remoteGreedy(std::vector<std::unique_ptr<RemoteStage>>& stages,
                              std::span<const int32_t> prompt, int steps, bool linked = false) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::shared_ptr<runtime::Stage>> links;
  if (linked) {
    std::vector<std::shared_ptr<RemoteStage>> parts;
    for (auto& s : stages) parts.emplace_back(s.get(), [](RemoteStage*) {});  // `stages` owns
    links.push_back(std::make_shared<LinkedStages>(std::move(parts)));
  } else {
    for (auto& s : stages) {
      s->setLinks(false, false);  // relayed by the caller, whatever a LinkedStages set before
      links.emplace_back(s.get(), [](runtime::Stage*) {});  // `stages` owns
    }
  }
  runtime::Chain chain(std::move(links));
  chain.truncate(0, 0);
  const runtime::SampleRequest greedy;  // temperature 0
  runtime::StageOutput out;
  const auto pass = [&](std::span<const int32_t> tokens, int32_t pos) {
    chain.forward(0, pos, tokens, out, runtime::LogitRows::Last, &greedy);
    if (out.tokens.size() != 1) throw Error("the remote head sampled no token");
    return out.tokens.front();
  };
  GreedyRun run;
  run.tokens.push_back(pass(prompt, 0));
  auto pos = static_cast<int32_t>(prompt.size());
  for (int i = 1; i < steps; ++i) {
    const auto t0 = Clock::now();
    const int32_t one[1] = {run.tokens.back()};
    run.tokens.push_back(pass(one, pos++));
    run.stepMs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return run;
}

// The model's layers split evenly over clients.size() stages, stage k on clients[k] (cpu0),
// each taking at most maxBatch rows per forward; the stage ids are "<prefix>-<k>".
inline std::vector<std::unique_ptr<RemoteStage>> deploySplit(
    const std::vector<std::shared_ptr<NodeClient>>& clients, const model::Model& m,
    const std::string& sha256, const std::string& prefix, int32_t contextLength = 256,
    const WeightsProgress& progress = {}, int32_t maxBatch = 256) {
  std::vector<std::unique_ptr<RemoteStage>> stages;
  const auto n = static_cast<int32_t>(clients.size());
  const int32_t nLayer = m.config().nLayer;
  for (int32_t k = 0; k < n; ++k) {
    LoadStageRequest r;
    r.stageId = prefix + "-" + std::to_string(k);
    r.model = {sha256, "model.gguf", m.file().fileSize()};
    r.placement.nodeId = clients[size_t(k)]->peerDeviceId();
    r.placement.deviceId = "cpu0";
    r.placement.firstLayer = nLayer * k / n;
    r.placement.lastLayer = nLayer * (k + 1) / n;
    r.placement.hasEmbedding = k == 0;
    r.placement.hasHead = k == n - 1;
    r.contextLength = contextLength;
    r.maxBatch = maxBatch;
    stages.push_back(RemoteStage::deploy(clients[size_t(k)], m.file(), r, progress));
  }
  return stages;
}

// One raw request and its reply (matched by a fresh id; other messages are skipped).
inline Message rawCall(Connection& c, nlohmann::json control, std::vector<uint8_t> blob = {}) {
  static int64_t id = int64_t{1} << 40;  // far above NodeClient's ids on the same connection
  control["id"] = ++id;
  Message m;
  m.control = std::move(control);
  m.blob = std::move(blob);
  c.send(m);
  for (;;) {
    Message r = c.receive(std::chrono::seconds(60));
    if (r.control.value("id", int64_t{-1}) == id) return r;
  }
}

// Tensor bytes as a coordinator would stream them; a test may change them (the hash sent is of
// what it returns, so the node's per-tensor check passes: a lying coordinator's stream).
using TensorBytes =
    std::function<std::vector<uint8_t>(const std::string& name, std::span<const uint8_t> bytes)>;

// A hidden-to-hidden stage of layers [first, last) streamed on a raw connection the way
// NodeClient::loadStage does, each tensor's bytes passed through `bytes`. Returns the reply to
// weights_done (stage_ready or error), or the load_stage reply when it was not need_weights.
inline Message streamStageRaw(Connection& c, const gguf::File& f, const std::string& sha256,
                              const std::string& stageId, int32_t first, int32_t last,
                              const TensorBytes& bytes) {
  gguf::Writer meta;
  for (const auto& kv : f.metadata()) meta.set(kv.key, kv.value);
  const Message need = rawCall(c,
                               {{"op", "load_stage"},
                                {"stage_id", stageId},
                                {"model", {{"sha256", sha256}, {"name", "m"}, {"size", 1}}},
                                {"device", "cpu0"},
                                {"first_layer", first},
                                {"last_layer", last},
                                {"has_embedding", false},
                                {"has_head", false},
                                {"context_length", 16},
                                {"max_sequences", 1}},
                               meta.toBytes());
  if (need.control.value("op", "") != "need_weights") return need;
  std::vector<std::string> names = need.control["tensors"].get<std::vector<std::string>>();
  for (const auto& n : need.control["optional"]) {
    if (f.findTensor(n.get<std::string>())) names.push_back(n.get<std::string>());
  }
  for (const std::string& name : names) {
    const gguf::TensorInfo* t = f.findTensor(name);
    const std::vector<uint8_t> data = bytes(name, {t->data, t->nbytes});
    const std::string digest = sha256Hex(data);
    for (size_t offset = 0; offset < data.size();) {
      const size_t len = std::min(kWeightChunkBytes, data.size() - offset);
      Message chunk;
      chunk.control = {{"op", "weights_chunk"}, {"stage_id", stageId},
                       {"tensor", name},        {"offset", offset},
                       {"total", data.size()},  {"type", static_cast<uint32_t>(t->type)},
                       {"dims", t->dims}};
      if (offset + len == data.size()) chunk.control["sha256"] = digest;
      chunk.blob.assign(data.begin() + std::ptrdiff_t(offset),
                        data.begin() + std::ptrdiff_t(offset + len));
      c.send(chunk);
      offset += len;
    }
  }
  return rawCall(c, {{"op", "weights_done"}, {"stage_id", stageId}});
}

}  // namespace shoal::lan::test
