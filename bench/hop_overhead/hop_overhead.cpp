// shoal-hop-overhead: what a network hop costs per generated token. Runs greedy decoding of the
// model through one local stage and through 1, 2 and 3 remote stages (the layers split evenly,
// every stage on its own shoal-node, the coordinator relaying as in a pool), and reports medians
// of the per-token decode time and the overhead per hop:
//   overhead per hop = (remote ms/token - local ms/token) / stages
// since each stage adds one coordinator -> node -> coordinator round trip per token; and, on its
// own, the pure relay round trip of a hidden state (no compute).
//
// Method (why: bench/hop_overhead/README.md). The compute runs on one CPU in both cases and the
// coordinator's relaying on another (--pin, the default with 2+ CPUs): the nodes it starts and
// the local stage are pinned to the last allowed CPU, the coordinator thread to the first. Every
// stage (local and remote) is created once and reused, every configuration gets one unmeasured
// warm-up run, then the runs alternate (local, 1, 2, 3 stages, relay probe, local, ...) so load
// on the machine is spread over all of them; medians over runs of per-run medians. The local
// steps' CPU time is reported next to their wall time: wall well above CPU means the step
// waited for a core (load), which is what made earlier figures negative.
//
// Nodes: by default it starts --nodes shoal-node processes on 127.0.0.1 itself (loopback). With
// --connect HOST:PORT (repeatable, plus --trust for each node's device ID and --identity-dir
// for the coordinator identity the nodes were told to trust) it uses running nodes, e.g. in the
// network namespaces of tests/integration/netns (veth links): see run.sh.
//
// --verify also checks that every remote run generated exactly the local run's tokens (exit 1
// otherwise). Output: one JSON object on stdout.

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "lan/pool/remote_stage.h"
#include "lan/pool/sha256.h"
#include "lan/transport/connect.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"
#include "tests/integration/lan_node/node_test_support.h"

namespace {

using namespace shoal;
using Clock = std::chrono::steady_clock;

// A child process whose stdout is a pipe to us.
struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout
};

// Starts argv[0] with argv; pinned to `cpu` when >= 0 (inherited by its threads).
Child spawn(const std::vector<std::string>& argv, int cpu) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  return Child{pid, fds[0]};
}

std::string readLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

std::string runForLine(const std::vector<std::string>& argv) {
  const Child c = spawn(argv, -1);
  const std::string line = readLine(c.out);
  close(c.out);
  waitpid(c.pid, nullptr, 0);
  return line;
}

struct Node {
  pid_t pid = -1;
  uint16_t port = 0;
};

Node startNode(const std::string& exe, const std::filesystem::path& config,
               const std::string& modelsDir, const std::string& trust, int threads, int cpu) {
  std::vector<std::string> argv = {
      exe,       "--config-dir", config.string(),  "--port",    "0",
      "--bind",  "127.0.0.1",    "--no-discovery", "--threads", std::to_string(threads),
      "--trust", trust};
  if (!modelsDir.empty()) {
    argv.push_back("--models-dir");
    argv.push_back(modelsDir);
  }
  const Child c = spawn(argv, cpu);
  // "shoal-node <name>: device <ID> port <port>"
  const std::string line = readLine(c.out);
  close(c.out);
  const auto at = line.rfind(" port ");
  if (at == std::string::npos) throw std::runtime_error("shoal-node did not start: " + line);
  return Node{c.pid, static_cast<uint16_t>(std::stoi(line.substr(at + 6)))};
}

// The CPUs this process may run on, in order.
std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) out.push_back(i);
  }
  return out;
}

// Pins the calling thread (threads it creates afterwards inherit it); no-op for cpu < 0.
void pinThisThread(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    throw std::runtime_error("sched_setaffinity to CPU " + std::to_string(cpu) + " failed");
  }
}

// Median round trip of a hidden-state-sized message (bandwidth_probe -> pong): the transport's
// share of one hop, without any compute.
double probeRttMs(lan::Connection& c, size_t bytes, int count) {
  std::vector<double> ms;
  for (int i = 0; i < count; ++i) {
    lan::Message m;
    m.control = {{"op", "bandwidth_probe"}, {"id", int64_t{1} << 40 | i}};
    m.blob.assign(bytes, 0x5a);
    const auto t0 = Clock::now();
    c.send(m);
    for (;;) {
      const lan::Message r = c.receive(std::chrono::seconds(30));
      if (r.control.value("id", int64_t{-1}) == (int64_t{1} << 40 | i)) break;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// "/proc/loadavg" as it reads (1, 5, 15 min load, runnable/total tasks, last pid).
std::string loadAverage() {
  std::string line;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {};
    if (std::fgets(buf, sizeof buf, f)) line = buf;
    std::fclose(f);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal-hop-overhead: per-hop overhead of remote stages (JSON on stdout)"};
  std::string modelPath, nodeExe, identityDir, modelsDir;
  std::vector<std::string> connect, trust;
  int nodes = 3, steps = 64, repeats = 5, threads = 1, probes = 50;
  bool verify = false, streamed = false, noPin = false;
  app.add_option("-m,--model", modelPath, "GGUF model (default: the default model)");
  app.add_option("--node-exe", nodeExe, "shoal-node to start on loopback");
  app.add_option("--nodes", nodes, "most remote stages (1..nodes are measured)")
      ->check(CLI::Range(1, 16));
  app.add_option("--tokens", steps, "decode steps per run")->check(CLI::Range(2, 400));
  app.add_option("--repeats", repeats, "measured runs per configuration")
      ->check(CLI::Range(1, 100));
  app.add_option("--threads", threads, "CPU threads per stage (local and started nodes)")
      ->check(CLI::Range(1, 256));
  app.add_option("--probes", probes, "relay round trips per node per repeat")
      ->check(CLI::Range(1, 10000));
  app.add_option("--connect", connect, "HOST:PORT of a running node (repeatable)");
  app.add_option("--trust", trust, "device ID of a --connect node (repeatable)");
  app.add_option("--identity-dir", identityDir, "coordinator identity for --connect");
  app.add_flag("--streamed", streamed, "started nodes get no models dir: weights are streamed");
  app.add_flag("--no-pin", noPin, "do not pin compute and coordinator to separate CPUs");
  app.add_flag("--verify", verify, "exit 1 unless every remote run matches the local tokens");
  CLI11_PARSE(app, argc, argv);

  std::vector<Node> children;
  const auto stopChildren = [&] {
    for (const auto& c : children) kill(c.pid, SIGTERM);
    for (const auto& c : children) waitpid(c.pid, nullptr, 0);
    children.clear();
  };
  try {
    if (modelPath.empty()) modelPath = model::defaultModelPath();
    const auto m = model::Model::load(modelPath);
    const std::string sha = lan::sha256FileHex(modelPath);
    const std::vector<int32_t> prompt =
        m->tokenizer().encode("The capital of France is", true, false);

    // Compute (local stage, started nodes) on the last CPU, relaying on the first.
    const std::vector<int> cpus = allowedCpus();
    const bool pin = !noPin && cpus.size() >= 2;
    const int computeCpu = pin ? cpus.back() : -1;
    const int coordinatorCpu = pin ? cpus.front() : -1;

    nlohmann::json out;
    out["model"] = std::filesystem::path(modelPath).filename().string();
    out["threads"] = threads;
    out["tokens"] = steps;
    out["repeats"] = repeats;
    out["transport"] = connect.empty() ? "loopback" : "connect";
    out["pinned"] =
        pin ? nlohmann::json{{"compute_cpu", computeCpu}, {"coordinator_cpu", coordinatorCpu}}
            : nlohmann::json(nullptr);
    out["loadavg_start"] = loadAverage();

    lan::TrustStore trustStore;
    lan::Identity self;
    std::vector<std::pair<std::string, uint16_t>> endpoints;
    const auto tmp =
        std::filesystem::temp_directory_path() / ("shoal-hop-overhead-" + std::to_string(getpid()));
    if (connect.empty()) {
      if (nodeExe.empty()) throw std::runtime_error("--node-exe or --connect is required");
      self = lan::createIdentity();
      std::filesystem::create_directories(tmp / "models");
      std::filesystem::create_symlink(std::filesystem::absolute(modelPath),
                                      tmp / "models" / "model.gguf");
      for (int i = 0; i < nodes; ++i) {
        const auto cfg = tmp / ("node" + std::to_string(i));
        trustStore.add(runForLine({nodeExe, "--print-device-id", "--config-dir", cfg.string()}),
                       "node");
        children.push_back(startNode(nodeExe, cfg, streamed ? "" : (tmp / "models").string(),
                                     self.deviceId, threads, computeCpu));
        endpoints.emplace_back("127.0.0.1", children.back().port);
      }
    } else {
      if (identityDir.empty()) throw std::runtime_error("--connect needs --identity-dir");
      self = lan::loadOrCreateIdentity(identityDir);
      for (const auto& id : trust) trustStore.add(id, "node");
      for (const auto& c : connect) {
        const auto at = c.rfind(':');
        if (at == std::string::npos) throw std::runtime_error("--connect " + c + ": no port");
        endpoints.emplace_back(c.substr(0, at), static_cast<uint16_t>(std::stoi(c.substr(at + 1))));
      }
      nodes = static_cast<int>(endpoints.size());
    }

    // The local stage is made on the compute CPU (a thread pool's workers inherit it).
    pinThisThread(computeCpu);
    const std::unique_ptr<runtime::Stage> local = lan::test::localStage(*m, threads);
    pinThisThread(coordinatorCpu);

    std::vector<std::vector<std::unique_ptr<lan::RemoteStage>>> configs;
    for (int k = 1; k <= nodes; ++k) {
      std::vector<std::shared_ptr<lan::NodeClient>> clients;
      for (int i = 0; i < k; ++i) {
        clients.push_back(std::make_shared<lan::NodeClient>(
            lan::connectTo(endpoints[size_t(i)].first, endpoints[size_t(i)].second, self,
                           trustStore, std::chrono::seconds(30)),
            std::chrono::seconds(60)));
      }
      configs.push_back(lan::test::deploySplit(clients, *m, sha, "hop-" + std::to_string(k), 512));
    }
    std::vector<std::unique_ptr<lan::Connection>> probeConnections;
    for (const auto& [host, port] : endpoints) {
      probeConnections.push_back(
          lan::connectTo(host, port, self, trustStore, std::chrono::seconds(30)));
    }
    const size_t hiddenBytes = size_t(m->config().nEmbd) * sizeof(float);

    const auto runLocal = [&] {
      pinThisThread(computeCpu);
      lan::test::GreedyRun run = lan::test::localGreedy(*local, prompt, steps);
      pinThisThread(coordinatorCpu);
      return run;
    };
    // Warm-up: every stage's pages and caches touched once, unmeasured.
    const lan::test::GreedyRun reference = runLocal();
    for (auto& stages : configs) lan::test::remoteGreedy(stages, prompt, steps);

    std::vector<double> localMs, localCpuMs, relayMs;
    std::vector<std::vector<double>> remote(configs.size());
    std::vector<bool> match(configs.size(), true);
    for (int r = 0; r < repeats; ++r) {
      const lan::test::GreedyRun l = runLocal();
      localMs.push_back(median(l.stepMs));
      localCpuMs.push_back(median(l.stepCpuMs));
      for (size_t k = 0; k < configs.size(); ++k) {
        const lan::test::GreedyRun run = lan::test::remoteGreedy(configs[k], prompt, steps);
        remote[k].push_back(median(run.stepMs));
        match[k] = match[k] && run.tokens == reference.tokens;
      }
      for (auto& c : probeConnections) relayMs.push_back(probeRttMs(*c, hiddenBytes, probes));
    }
    const double localWall = median(localMs);
    out["local_ms_per_token"] = localWall;
    out["local_cpu_ms_per_token"] = median(localCpuMs);
    out["relay_bytes"] = hiddenBytes;
    out["relay_round_trip_ms_per_hop"] = median(relayMs);
    bool allMatch = true;
    for (size_t k = 0; k < configs.size(); ++k) {
      const double ms = median(remote[k]);
      const auto hops = static_cast<double>(k + 1);
      allMatch = allMatch && match[k];
      out["remote"].push_back({{"stages", k + 1},
                               {"load_source", configs[k].front()->loaded().source},
                               {"ms_per_token", ms},
                               {"overhead_ms_per_token", ms - localWall},
                               {"overhead_ms_per_hop", (ms - localWall) / hops},
                               {"tokens_match_local", bool(match[k])}});
    }
    out["tokens_match_local"] = allMatch;
    out["loadavg_end"] = loadAverage();
    configs.clear();
    probeConnections.clear();
    stopChildren();
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    std::printf("%s\n", out.dump(2).c_str());
    return verify && !allMatch ? 1 : 0;
  } catch (const std::exception& e) {
    stopChildren();
    std::fprintf(stderr, "shoal-hop-overhead: %s\n", e.what());
    return 2;
  }
}
