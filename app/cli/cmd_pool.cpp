// shoal-cli pool: use the LAN pool from the terminal, as its coordinator (lan/pool).
//
//   shoal-cli pool discover [--seconds S] [--json]          nodes announcing themselves
//   shoal-cli pool pair HOST:PORT CODE [--name NAME]        trust a node (code shown on it)
//   shoal-cli pool trusted [--json]                         the devices trusted.json lists
//   shoal-cli pool forget DEVICE_ID                         un-pair: stop trusting a device;
//                                      a shoal-node on the same --config-dir closes its
//                                      sessions within a second and refuses it from then on
//   shoal-cli pool status [--nodes A,B,...] [--json]        one telemetry snapshot
//   shoal-cli pool plan --nodes A,B,... [-m GGUF] [--ctx N] the pipeline it would deploy (JSON)
//   shoal-cli pool generate --nodes A,B,... -p PROMPT [-n N] [--json] [sampling options]
//                                      prints only the new text, as `shoal-cli generate` does
//   shoal-cli pool serve --nodes A,B,... [--parallel N] [--api-port P] ...
//                                      the OpenAI-compatible API over the pool (pool_serve.h)
//
// Every command takes --config-dir (default $XDG_CONFIG_HOME/shoal or ~/.config/shoal): the
// coordinator's identity and trusted.json, as on a node. Nodes are "host:port" (IPv6 in
// brackets); without --nodes, the trusted nodes LAN discovery finds in --seconds (3) are used.
// Exit codes: 0 done, 1 runtime failure (unreachable, untrusted, no plan), 2 bad input.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/cli/cli_support.h"
#include "app/cli/commands.h"
#include "app/cli/net_helper.h"
#ifdef SHOAL_CLI_POOL_SERVE
#include "app/cli/pool_serve.h"
#endif
#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/pool_file.h"
#include "lan/discovery/discovery.h"
#include "lan/pool/coordinator.h"
#include "lan/pool/pool_builder.h"
#include "lan/transport/connect.h"
#include "lan/transport/host_port.h"
#include "lan/transport/identity.h"
#include "lan/transport/listener.h"
#include "lan/transport/pairing.h"
#include "lan/transport/trust_store.h"

namespace shoal::cli {
namespace {

using nlohmann::json;

struct PoolOptions {
  std::string configDir;
  std::string nodes;  // comma-separated host:port
  std::string model;
  int contextLength = 0;  // 0: as `generate`, min(the model's training context, 4096)
  int parallel = 1;       // generations at once (KV slots per stage)
  int replies = 0;        // generate: copies of the prompt run at once (0: parallel)
  int timeoutMs = 10000;
  double maxDeviceMemoryMb = 0;
  int stages = 0;    // --stages: a plan over exactly this many stages (0: the planner's choice)
  int replicas = 1;  // serve --replicas: at most this many pipelines (0: the planner's choice)
  bool json = false;
  bool verbose = false;
  bool relay = false;   // --relay: every hop through the coordinator (no direct forwarding)
  bool noRing = false;  // --no-ring: no head -> first link (each token back to the coordinator)
  // discover
  double seconds = 3;
  // forget
  std::string deviceId;
  // pair
  std::string address;
  std::string code;
  std::string name;
  // generate
  CompletionOptions completion;
  std::string draftModel;  // --draft-model
#ifdef SHOAL_CLI_POOL_SERVE
  // serve
  api::ApiServerOptions api;
#endif
};

std::filesystem::path configDirOf(const PoolOptions& o) {
  if (!o.configDir.empty()) return o.configDir;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "shoal";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".config" / "shoal";
  }
  throw CliExit{2, "no --config-dir and neither XDG_CONFIG_HOME nor HOME is set"};
}

// A node address given on the command line (lan::splitHostPort's rules); bad input exits 2.
lan::HostPort nodeAddress(const std::string& text) {
  try {
    return lan::splitHostPort(text);
  } catch (const Error& e) {
    throw CliExit{2, std::string("node ") + e.what()};
  }
}

// The coordinator's identity and trust store, loaded once per command.
struct Credentials {
  lan::Identity identity;
  lan::TrustStore trust;
};

std::unique_ptr<Credentials> loadCredentials(const PoolOptions& o) {
  auto c = std::make_unique<Credentials>();
  const std::filesystem::path dir = configDirOf(o);
  try {
    c->identity = lan::loadOrCreateIdentity(dir);
    c->trust.load(dir);
  } catch (const Error& e) {
    throw CliExit{2, e.what()};
  }
  return c;
}

std::vector<lan::Peer> discoverPeers(const PoolOptions& o, Credentials& creds);
std::string peerAddress(const lan::Peer& p);

// --nodes, or else every trusted node discovery finds in --seconds.
std::vector<std::string> nodeList(const PoolOptions& o, Credentials& creds) {
  std::vector<std::string> out;
  if (o.nodes.empty()) {
    for (const lan::Peer& p : discoverPeers(o, creds)) {
      if (creds.trust.isTrusted(p.deviceId) && !peerAddress(p).empty()) {
        out.push_back(peerAddress(p));
      }
    }
    if (out.empty()) {
      throw CliExit{1, "no trusted node found on the LAN (pair with one, or give --nodes)"};
    }
    return out;
  }
  std::stringstream in(o.nodes);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  if (out.empty()) throw CliExit{2, "--nodes: give at least one host:port"};
  for (const std::string& a : out) nodeAddress(a);  // validates
  return out;
}

// --ctx, or its default as `shoal-cli generate` has it: the model's training context, at most 4096
// (2048 when the model cannot be read: loading it later says why).
int32_t contextFor(const PoolOptions& o) {
  if (o.contextLength > 0) return o.contextLength;
  try {
    const gguf::File file = gguf::File::open(o.model.empty() ? defaultModelPath() : o.model);
    return std::min(model::ModelConfig::fromGguf(file).nCtxTrain, 4096);
  } catch (const std::exception&) {
    return 2048;
  }
}

std::unique_ptr<lan::Coordinator> connectPool(const PoolOptions& o, Credentials& creds) {
  const std::chrono::milliseconds timeout(o.timeoutMs);
  lan::Connector connector = [&creds, timeout](const std::string& address) {
    const auto [host, port] = lan::splitHostPort(address);
    return lan::connectTo(host, port, creds.identity, creds.trust, timeout);
  };
  lan::CoordinatorOptions co;
  co.contextLength = contextFor(o);
  co.maxSequences = o.parallel;
  co.maxPipelines = o.replicas;
  co.maxDeviceMemoryBytes = static_cast<uint64_t>(o.maxDeviceMemoryMb * 1e6);
  co.requestTimeout = std::max(timeout, std::chrono::milliseconds(30000));
  co.directForwarding = !o.relay;
  co.decodeRing = !o.noRing;
  if (o.verbose) {
    co.log = [](const std::string& line) { std::fprintf(stderr, "pool: %s\n", line.c_str()); };
  }
  auto c = std::make_unique<lan::Coordinator>(connector, co);
  for (const std::string& address : nodeList(o, creds)) {
    try {
      c->addNode(address);
    } catch (const lan::TransportError& e) {
      throw CliExit{1, "node " + address + ": " + e.what()};
    }
  }
  c->profileLinks();
  return c;
}

void prepareModel(lan::Coordinator& c, const PoolOptions& o) {
  try {
    c.setModel(o.model.empty() ? defaultModelPath() : o.model);
  } catch (const Error& e) {
    throw CliExit{2, e.what()};
  }
}

json stagesJson(const std::vector<lan::StagePlacement>& stages,
                const std::vector<lan::NodeInfo>& nodes) {
  json out = json::array();
  for (const lan::StagePlacement& s : stages) {
    std::string name;
    for (const lan::NodeInfo& n : nodes) {
      if (n.deviceId == s.nodeId) name = n.name;
    }
    out.push_back({{"node", s.nodeId},
                   {"node_name", name},
                   {"device", s.deviceId},
                   {"first_layer", s.firstLayer},
                   {"last_layer", s.lastLayer},
                   {"has_embedding", s.hasEmbedding},
                   {"has_head", s.hasHead}});
  }
  return out;
}

json hopJson(const lan::PipelineHop& h) {
  return {{"from", h.fromNode},
          {"to", h.toNode},
          {"direct", h.direct},
          {"note", h.note},
          {"rtt_ms", h.rttS * 1e3}};
}

json hopsJson(const std::vector<lan::PipelineHop>& hops) {
  json out = json::array();
  for (const lan::PipelineHop& h : hops) out.push_back(hopJson(h));
  return out;
}

// "layers 0-0 on a, direct to layers 1-20 on b, relayed to layers 21-29 on c" (", ring back to
// a" when c is linked to a): which node holds which layers and how each hop travels.
std::string pipelineLine(const lan::Coordinator& c, size_t replica = 0) {
  const std::vector<lan::PipelineHop> hops = c.hops(replica);
  std::string line;
  size_t i = 0;
  for (const json& st : stagesJson(c.deployed(replica), c.nodes())) {
    if (i > 0) {
      line += i - 1 < hops.size() && hops[i - 1].direct ? ", direct to " : ", relayed to ";
    }
    line += "layers " + std::to_string(st["first_layer"].get<int>()) + "-" +
            std::to_string(st["last_layer"].get<int>() - 1) + " on " +
            st["node_name"].get<std::string>();
    ++i;
  }
  const lan::PipelineHop ring = c.ring(replica);
  if (ring.direct) line += ", ring back to " + ring.toNode;
  return line;
}

// Peers announcing themselves during o.seconds.
std::vector<lan::Peer> discoverPeers(const PoolOptions& o, Credentials& creds) {
  // Discovery announces as well as listens; what it announces must be true, so the coordinator
  // accepts connections while it runs (and refuses every one: it hosts nothing).
  lan::Listener listener("0.0.0.0", 0, creds.identity, creds.trust,
                         [](std::unique_ptr<lan::Connection> c) { c->close(); });
  lan::DiscoveryOptions d;
  d.deviceId = creds.identity.deviceId;
  d.name = o.name.empty() ? "shoal-cli" : o.name;
  d.tcpPort = listener.port();
  d.summary = "coordinator";
  d.log = [](const std::string& line) { std::fprintf(stderr, "discovery: %s\n", line.c_str()); };
  lan::Discovery discovery(d);
  try {
    discovery.start();
  } catch (const Error& e) {
    throw CliExit{1, e.what()};
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  std::vector<lan::Peer> peers = discovery.peers();
  discovery.stop();
  return peers;
}

// "host:port" of a discovered peer (lan::dialEndpoint: a confirmed endpoint, else an IPv4 source
// address, which has no zone to carry). The connection is pinned, so a forged beacon can at most
// make this dial fail, never reach an impostor.
std::string peerAddress(const lan::Peer& p) {
  const std::optional<lan::PeerEndpoint> e = lan::dialEndpoint(p);
  if (!e) return {};
  return lan::joinHostPort(e->address, e->port);
}

void runDiscover(const PoolOptions& o) {
  auto creds = loadCredentials(o);
  const std::vector<lan::Peer> peers = discoverPeers(o, *creds);
  if (o.json) {
    json out = json::array();
    for (const lan::Peer& p : peers) {
      json addresses = json::array();
      for (const lan::PeerAddress& a : p.addresses) addresses.push_back(a.address);
      out.push_back({{"device_id", p.deviceId},
                     {"name", p.name},
                     {"port", p.tcpPort},
                     {"summary", p.summary},
                     {"addresses", addresses},
                     {"trusted", creds->trust.isTrusted(p.deviceId)}});
    }
    std::printf("%s\n", json({{"peers", out}}).dump(2).c_str());
    return;
  }
  if (peers.empty()) std::printf("No Shoal nodes seen in %.1f s.\n", o.seconds);
  for (const lan::Peer& p : peers) {
    const std::string addr = p.addresses.empty() ? "?" : p.addresses.front().address;
    std::printf("%-20s %s:%u  %s%s\n  %s\n", p.name.c_str(), addr.c_str(), p.tcpPort,
                p.summary.c_str(), creds->trust.isTrusted(p.deviceId) ? "  (trusted)" : "",
                p.deviceId.c_str());
  }
}

void runPair(const PoolOptions& o) {
  auto creds = loadCredentials(o);
  const auto [host, port] = nodeAddress(o.address);
  std::string peer;
  try {
    peer = lan::pairWith(host, port, creds->identity, creds->trust, o.code,
                         o.name.empty() ? "shoal-cli" : o.name,
                         std::chrono::milliseconds(o.timeoutMs));
  } catch (const lan::TransportError& e) {
    // The transport's message already names the peer ("pairing with HOST:PORT ...").
    throw CliExit{1, e.what()};
  } catch (const Error& e) {
    throw CliExit{2, e.what()};
  }
  if (o.json) {
    std::printf("%s\n", json({{"device_id", peer}, {"address", o.address}}).dump().c_str());
  } else {
    std::printf("Paired with %s (%s); it is now trusted.\n", o.address.c_str(), peer.c_str());
  }
}

// The trust store alone (forget, trusted): no identity is created as a side effect.
std::unique_ptr<lan::TrustStore> loadTrust(const PoolOptions& o) {
  auto trust = std::make_unique<lan::TrustStore>();
  try {
    trust->load(configDirOf(o));
  } catch (const Error& e) {
    throw CliExit{2, e.what()};
  }
  return trust;
}

void runTrusted(const PoolOptions& o) {
  const auto trust = loadTrust(o);
  const std::vector<lan::TrustedDevice> devices = trust->list();
  if (o.json) {
    json out = json::array();
    for (const lan::TrustedDevice& d : devices) {
      out.push_back({{"device_id", d.deviceId}, {"name", d.name}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (devices.empty()) std::printf("No trusted devices in %s.\n", trust->file().c_str());
  for (const lan::TrustedDevice& d : devices) {
    std::printf("%s  %s\n", d.deviceId.c_str(), d.name.c_str());
  }
}

void runForget(const PoolOptions& o) {
  std::string id;
  try {
    id = lan::normalizeDeviceId(o.deviceId);
  } catch (const Error& e) {
    throw CliExit{2, e.what()};
  }
  const auto trust = loadTrust(o);
  const std::string name = trust->nameOf(id).value_or("");
  bool removed = false;
  try {
    removed = trust->remove(id);
  } catch (const Error& e) {
    throw CliExit{1, e.what()};
  }
  if (!removed) {
    throw CliExit{1, "device " + id + " is not trusted in " + trust->file().string() +
                         " (nothing to forget; see shoal-cli pool trusted)"};
  }
  if (o.json) {
    std::printf("%s\n",
                json({{"device_id", id}, {"name", name}, {"forgotten", true}}).dump().c_str());
  } else {
    std::printf("Forgot %s (%s): it is no longer trusted; pair again to trust it.\n",
                name.empty() ? "device" : name.c_str(), id.c_str());
  }
}

void runStatus(const PoolOptions& o) {
  auto creds = loadCredentials(o);
  auto c = connectPool(o, *creds);
  const lan::PoolSnapshot s = c->pollSnapshot();
  // What the nodes want their user to know (e.g. a proven identity clash), by node.
  json warnings = json::array();
  for (const lan::NodeInfo& n : c->nodes()) {
    for (const std::string& w : n.warnings) {
      warnings.push_back({{"node", n.name}, {"device_id", n.deviceId}, {"warning", w}});
    }
  }
  // Which of this coordinator's stages forward straight to the next node (direct forwarding), as
  // the nodes report them; the other hops of a deployment are relayed through the coordinator.
  json forwarding = json::array();
  const std::vector<lan::NodeInfo> members = c->nodes();
  for (const lan::NodeInfo& n : members) {
    for (const lan::NodeForward& f : n.forwards) {
      std::string to = f.toDevice;
      for (const lan::NodeInfo& m : members) {
        if (m.deviceId == f.toDevice) to = m.name;
      }
      forwarding.push_back({{"node", n.name},
                            {"stage_id", f.stageId},
                            {"first_layer", f.firstLayer},
                            {"last_layer", f.lastLayer},
                            {"to", to},
                            {"to_device", f.toDevice},
                            {"address", f.address},
                            {"open", f.open}});
    }
  }
  if (o.json) {
    json out = s;
    if (!warnings.empty()) out["warnings"] = warnings;
    out["direct_forwarding"] = forwarding;
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  for (const json& f : forwarding) {
    std::printf("%s forwards layers %d-%d directly to %s (%s)\n",
                f["node"].get<std::string>().c_str(), f["first_layer"].get<int>(),
                f["last_layer"].get<int>() - 1, f["to"].get<std::string>().c_str(),
                f["open"].get<bool>() ? "link up" : "link down: relayed");
  }
  for (const json& w : warnings) {
    std::printf("warning from %s: %s\n", w["node"].get<std::string>().c_str(),
                w["warning"].get<std::string>().c_str());
  }
  std::printf("%-20s %-10s %-28s %12s %6s\n", "node", "device", "name", "memory", "busy");
  for (const lan::DeviceTelemetry& d : s.devices) {
    std::printf("%-20s %-10s %-28s %9.1f GB %5.0f%%\n", d.nodeName.c_str(), d.deviceId.c_str(),
                d.deviceName.c_str(), static_cast<double>(d.memoryTotal) / 1e9,
                d.busyFraction * 100);
  }
  const std::vector<lan::NodeInfo> nodes = c->nodes();
  for (const lan::NodeLinkProfile& l : c->links()) {
    std::string name = l.nodeId;
    for (const lan::NodeInfo& n : nodes) {
      if (n.deviceId == l.nodeId) name = n.name;
    }
    std::printf("link to %s: rtt %.2f ms, %.1f MB/s\n", name.c_str(), l.rttS * 1e3,
                l.bandwidthBytesPerS / 1e6);
  }
}

// The plan, or with --stages N one over exactly N stages. The planner uses the fewest devices
// that give the fastest chat, so N is reached by capping every device's memory: the largest cap
// (bisected between 1 MB and the largest device's memory, within 0.5%) whose plan has N stages.
// A cap also given by --max-device-memory-mb stays an upper bound.
plan::Plan planFor(lan::Coordinator& c, const PoolOptions& o) {
  if (o.stages <= 0) return c.makePlan();
  auto stagesAt = [&](double capBytes) {
    c.setMaxDeviceMemory(static_cast<uint64_t>(capBytes));
    const plan::Plan p = c.makePlan();
    return p.feasible ? lan::pipelineStages(p).size() : std::numeric_limits<size_t>::max();
  };
  double hi = 0;
  for (const plan::Device& d : c.pool().devices) hi = std::max(hi, d.memoryBytes);
  if (o.maxDeviceMemoryMb > 0) hi = std::min(hi, o.maxDeviceMemoryMb * 1e6);
  const auto want = static_cast<size_t>(o.stages);
  double lo = 1e6;  // the largest cap known to give at least `want` stages (or none)
  if (stagesAt(hi) >= want) {
    lo = hi;
  } else {
    while (hi / lo > 1.005) {
      const double mid = std::sqrt(lo * hi);
      (stagesAt(mid) >= want ? lo : hi) = mid;
    }
  }
  const size_t got = stagesAt(lo);
  if (got != want) {
    throw CliExit{1, "no plan over exactly " + std::to_string(want) + " stage(s) on this pool (" +
                         (got == std::numeric_limits<size_t>::max()
                              ? std::string("none fits")
                              : "the nearest has " + std::to_string(got)) +
                         ")"};
  }
  return c.makePlan();
}

void runPlanCommand(const PoolOptions& o) {
  auto creds = loadCredentials(o);
  auto c = connectPool(o, *creds);
  prepareModel(*c, o);
  const auto t0 = std::chrono::steady_clock::now();
  const plan::Plan p = planFor(*c, o);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  json out = json::parse(plan::planToJson(p, ms));
  if (p.feasible) out["deploy"] = stagesJson(lan::pipelineStages(p), c->nodes());
  // The pool as the planner saw it (a pool file, `shoal-cli plan --pool` reads it back): what a
  // fit estimate made elsewhere (before a download) needs to predict this very plan.
  plan::PoolFile seen;
  seen.pool = c->pool();
  seen.request.contextTokens = contextFor(o);
  seen.request.sequences = o.parallel;
  out["pool"] = json::parse(plan::writePoolFile(seen));
  std::printf("%s\n", out.dump(2).c_str());
  if (!p.feasible) throw CliExit{1, ""};
}

json recoveriesJson(const lan::Coordinator& c) {
  json recoveries = json::array();
  for (const lan::RecoveryEvent& e : c.recoveries()) {
    recoveries.push_back({{"failed_node", e.failedNodeId},
                          {"cause", e.cause},
                          {"after_tokens", e.generatedBefore},
                          {"seconds", e.seconds},
                          {"moved_bytes", e.movedBytes}});
  }
  return recoveries;
}

// --parallel N: the prompt as N generations at once (continuous batching over the pool), for
// aggregate throughput; each reply printed after all have finished.
void runConcurrently(lan::Coordinator& c, const PoolOptions& o,
                     const std::vector<model::TokenId>& prompt, const runtime::GenerateOptions& g,
                     double deploySeconds) {
  const int count = o.replies > 0 ? o.replies : o.parallel;
  std::vector<lan::Coordinator::PoolRequest> requests(static_cast<size_t>(count));
  for (auto& r : requests) {
    r.prompt = prompt;
    r.options = g;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<lan::Coordinator::PoolReply> replies;
  try {
    replies = c.generateConcurrently(requests);
  } catch (const std::exception& e) {
    throw CliExit{1, std::string("generation failed: ") + e.what()};
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t tokens = 0;
  json out = json::array();
  std::string firstError;
  for (const auto& r : replies) {
    tokens += r.result.tokens.size();
    if (!r.error.empty() && firstError.empty()) firstError = r.error;
    out.push_back({{"text", r.result.text},
                   {"tokens", r.result.tokens},
                   {"finish", std::string(runtime::finishReasonName(r.result.finish))},
                   {"error", r.error},
                   {"prefill_s", r.result.prefillSeconds},
                   {"decode_s", r.result.decodeSeconds},
                   {"recoveries", r.result.recoveries}});
  }
  const double aggregate = wall > 0 ? static_cast<double>(tokens) / wall : 0;
  if (o.json) {
    const json summary = {{"replies", out},
                          {"parallel", o.parallel},
                          {"replies", count},
                          {"deploy_s", deploySeconds},
                          {"wall_s", wall},
                          {"aggregate_tokens_per_s", aggregate},
                          {"predicted_tokens_per_s", c.predictedTokensPerS()},
                          {"stages", stagesJson(c.deployed(), c.nodes())},
                          {"hops", hopsJson(c.hops())},
                          {"recoveries", recoveriesJson(c)}};
    std::printf("%s\n", summary.dump().c_str());
  } else {
    for (size_t i = 0; i < replies.size(); ++i) {
      std::printf("--- reply %zu ---\n%s\n", i + 1, replies[i].result.text.c_str());
    }
    std::fprintf(stderr, "[%d replies, %zu tokens in %.2f s: %.1f tokens/s, %zu stage(s)%s]\n",
                 count, tokens, wall, aggregate, c.deployed().size(),
                 c.recoveries().empty() ? "" : ", recovered from a node failure");
  }
  if (!firstError.empty()) throw CliExit{1, "generation failed: " + firstError};
}

// Plans (planFor) and deploys the model over the pool; returns the seconds both took.
double planAndDeploy(lan::Coordinator& c, const PoolOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const plan::Plan p = planFor(c, o);
  if (!p.feasible) throw CliExit{1, "no plan for this pool: " + p.infeasibleReason};
  try {
    c.deploy(p, [&](const lan::DeployProgress& d) {
      if (o.verbose && d.done) {
        std::fprintf(stderr, "stage %zu/%zu on %s ready\n", d.stage + 1, d.stages,
                     d.nodeName.c_str());
      }
    });
  } catch (const std::exception& e) {
    throw CliExit{1, std::string("deploy failed: ") + e.what()};
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void runPoolGenerate(const PoolOptions& o) {
  auto creds = loadCredentials(o);
  auto c = connectPool(o, *creds);
  prepareModel(*c, o);
  const double deploySeconds = planAndDeploy(*c, o);
  const model::Tokenizer& tok = c->model().tokenizer();
  const auto prompt = o.completion.encodePrompt(tok);
  const double predictedTtft = c->predictedTtftS(static_cast<int>(prompt.size()));
  if (!o.json) {
    // Which node holds which layers, before the reply streams (the JSON has it as "stages" and
    // "hops").
    std::fprintf(stderr, "[pool: %s; predicted %.1f tokens/s, first token in %.2f s]\n",
                 pipelineLine(*c).c_str(), c->predictedTokensPerS(), predictedTtft);
  }
  const runtime::GenerateOptions g = o.completion.generateOptions();
  if (o.parallel > 1 || o.replies > 0) return runConcurrently(*c, o, prompt, g, deploySeconds);
  // A draft model on this machine proposes tokens that one pass through the pool verifies.
  const auto draft = g.lookup.maxDraft > 0 ? loadDraftModel(o.draftModel, c->model().path(), tok, 0,
                                                            o.verbose && !o.json)
                                           : nullptr;
  c->setDrafter(draft ? draft->drafter.get() : nullptr);
  runtime::GenerateResult r;
  try {
    r = c->generate(prompt, g, [&](std::string_view piece) {
      if (!o.json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    });
  } catch (const std::exception& e) {
    throw CliExit{1, std::string("generation failed: ") + e.what()};
  }
  const double tokS =
      r.decodeSeconds > 0 && r.tokens.size() > 1 ? (r.tokens.size() - 1) / r.decodeSeconds : 0;
  if (o.json) {
    const json recoveries = recoveriesJson(*c);
    json out = {{"text", r.text},
                {"tokens", r.tokens},
                {"finish", std::string(runtime::finishReasonName(r.finish))},
                {"prompt_tokens", r.promptTokens},
                {"deploy_s", deploySeconds},
                {"prefill_s", r.prefillSeconds},
                {"decode_s", r.decodeSeconds},
                {"tokens_per_s", tokS},
                {"drafted_tokens", r.draftedTokens},
                {"accepted_tokens", r.acceptedTokens},
                {"verify_steps", r.verifySteps},
                {"model_drafted_tokens", r.modelDraftedTokens},
                {"model_accepted_tokens", r.modelAcceptedTokens},
                {"ahead_steps", r.aheadSteps},
                {"ahead_tokens", r.aheadTokens},
                {"predicted_tokens_per_s", c->predictedTokensPerS()},
                {"predicted_ttft_s", predictedTtft},
                {"stages", stagesJson(c->deployed(), c->nodes())},
                {"hops", hopsJson(c->hops())},
                {"ring", hopJson(c->ring())},
                {"recoveries", recoveries}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::fprintf(stderr,
               "\n[%zu tokens, deploy %.2f s, prefill %.2f s, %.1f tokens/s, %zu stage(s)%s%s]\n",
               r.tokens.size(), deploySeconds, r.prefillSeconds, tokS, c->deployed().size(),
               c->recoveries().empty() ? "" : ", recovered from a node failure",
               r.draftedTokens > 0 ? (", drafts accepted " + std::to_string(r.acceptedTokens) +
                                      "/" + std::to_string(r.draftedTokens))
                                         .c_str()
                                   : "");
}

#ifdef SHOAL_CLI_POOL_SERVE
void runPoolServe(const PoolOptions& o) {
  if (const std::string why = api::unsafeOptions(o.api); !why.empty()) throw CliExit{2, why};
  auto creds = loadCredentials(o);
  auto c = connectPool(o, *creds);
  prepareModel(*c, o);
  // A draft model on this machine proposes tokens for each reply where prompt lookup has none
  // (loaded before deploying: a bad file is refused before the nodes load anything).
  const auto draft = o.api.draftMax > 0
                         ? loadDraftModel(o.draftModel, c->model().path(), c->model().tokenizer(),
                                          0, o.verbose, o.parallel, contextFor(o))
                         : nullptr;
  planAndDeploy(*c, o);
  // A drafter serves one scheduler: each further replica gets its own copy of the draft model.
  std::vector<std::unique_ptr<DraftModel>> moreDrafts;
  std::vector<runtime::ModelDrafter*> drafters;
  if (draft) {
    drafters.push_back(draft->drafter.get());
    for (size_t r = 1; r < c->replicaCount(); ++r) {
      moreDrafts.push_back(loadDraftModel(o.draftModel, c->model().path(), c->model().tokenizer(),
                                          0, false, o.parallel, contextFor(o)));
      drafters.push_back(moreDrafts.back()->drafter.get());
    }
  }
  std::string line;
  for (size_t r = 0; r < c->replicaCount(); ++r) {
    char predicted[64];
    std::snprintf(predicted, sizeof predicted, " (predicted %.1f tokens/s)",
                  c->predictedTokensPerS(r));
    line += (r                       ? "; replica "
             : c->replicaCount() > 1 ? "replica "
                                     : "") +
            (c->replicaCount() > 1 ? std::to_string(r + 1) + ": " : std::string()) +
            pipelineLine(*c, r) + predicted;
  }
  try {
    servePoolApi(*c, o.api, line, drafters);
  } catch (const CliExit&) {
    throw;
  } catch (const std::exception& e) {
    throw CliExit{1, std::string("serving failed: ") + e.what()};
  }
}
#endif

void addCommon(CLI::App& cmd, PoolOptions& o) {
  cmd.add_option("--config-dir", o.configDir,
                 "coordinator identity and trusted.json (default ~/.config/shoal)");
  cmd.add_option("--timeout-ms", o.timeoutMs, "connect/pair timeout")->check(CLI::Range(1, 600000));
  cmd.add_flag("--json", o.json, "machine-readable output");
  cmd.add_flag("-v,--verbose", o.verbose, "log deployment and recovery to stderr");
}

void addPoolNodes(CLI::App& cmd, PoolOptions& o) {
  cmd.add_option("--nodes", o.nodes,
                 "comma-separated host:port of trusted nodes (default: the trusted nodes "
                 "discovery finds in --seconds)");
  cmd.add_option("--seconds", o.seconds, "how long to look for nodes without --nodes")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 600.0));
  cmd.add_option("-m,--model", o.model, "GGUF model file (default: the default model)");
  cmd.add_option("--ctx", o.contextLength,
                 "context length of every stage (default: min(model, 4096), as generate)")
      ->check(CLI::Range(16, 1 << 20));
  cmd.add_option("--parallel", o.parallel,
                 "sequences every stage holds (the planner's S); generate runs the prompt as "
                 "this many generations at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd.add_option("--max-device-memory-mb", o.maxDeviceMemoryMb,
                 "use at most this much memory of any device (default: all it has free)")
      ->check(CLI::Range(0.0, 1e9));
  cmd.add_flag("--relay", o.relay,
               "relay every hidden state through this coordinator instead of letting each node "
               "send it straight to the next (direct forwarding, the default)");
  cmd.add_flag("--no-ring", o.noRing,
               "do not link the last node back to the first: every decoded token of a pipeline "
               "of several nodes returns to this coordinator before the next is sent");
  cmd.add_option("--stages", o.stages,
                 "place the model on exactly this many stages (by capping each device's memory; "
                 "default: the planner's choice, the fastest chat)")
      ->check(CLI::Range(1, 64));
}

}  // namespace

void registerPoolCommand(CLI::App& app) {
  auto opt = std::make_shared<PoolOptions>();
  CLI::App* pool = app.add_subcommand("pool", netCommandHelp("pool"));
  pool->require_subcommand(1);

  CLI::App* discover = pool->add_subcommand("discover", "List nodes announcing themselves");
  addCommon(*discover, *opt);
  discover->add_option("--seconds", opt->seconds, "how long to listen")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 600.0));
  discover->add_option("--name", opt->name, "name to announce");
  discover->callback([opt] { runDiscover(*opt); });

  CLI::App* pair = pool->add_subcommand("pair", "Pair with a node using the code it shows");
  addCommon(*pair, *opt);
  pair->add_option("address", opt->address, "host:port of the node")->required();
  pair->add_option("code", opt->code, "pairing code, e.g. ABCD-EFGH")->required();
  pair->add_option("--name", opt->name, "the name the node stores for us");
  pair->callback([opt] { runPair(*opt); });

  CLI::App* trusted = pool->add_subcommand("trusted", "List the devices this config dir trusts");
  addCommon(*trusted, *opt);
  trusted->callback([opt] { runTrusted(*opt); });

  CLI::App* forget =
      pool->add_subcommand("forget", "Un-pair: stop trusting a device (live sessions close)");
  addCommon(*forget, *opt);
  forget->add_option("device_id", opt->deviceId, "device ID (see pool trusted)")->required();
  forget->callback([opt] { runForget(*opt); });

  CLI::App* status = pool->add_subcommand("status", "One telemetry snapshot of the nodes");
  addCommon(*status, *opt);
  addPoolNodes(*status, *opt);
  status->callback([opt] { runStatus(*opt); });

  CLI::App* planCmd = pool->add_subcommand("plan", "The pipeline the pool would deploy (JSON)");
  addCommon(*planCmd, *opt);
  addPoolNodes(*planCmd, *opt);
  planCmd->callback([opt] { runPlanCommand(*opt); });

  CLI::App* gen = pool->add_subcommand("generate", "Deploy the model over the nodes and generate");
  addCommon(*gen, *opt);
  addPoolNodes(*gen, *opt);
  addCompletionOptions(*gen, opt->completion);
  addDraftModelOption(*gen, opt->draftModel, "auto");
  gen->add_option("--replies", opt->replies,
                  "copies of the prompt generated at once (default: --parallel); e.g. 1 to "
                  "measure one stream on the deployment that --parallel plans")
      ->check(CLI::Range(1, 256));
  gen->callback([opt] { runPoolGenerate(*opt); });

#ifdef SHOAL_CLI_POOL_SERVE
  CLI::App* serve = pool->add_subcommand("serve",
                                         "Deploy the model over the nodes and serve the OpenAI API "
                                         "(--parallel replies at once: 4 unless given)");
  addCommon(*serve, *opt);
  addPoolNodes(*serve, *opt);
  serve->add_option("--api-host", opt->api.host, "address the API listens on")
      ->capture_default_str();
  serve->add_option("--api-port", opt->api.port, "API port (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  // As shoal-node's: the key belongs in SHOAL_API_KEY (a command line shows in ps).
  serve
      ->add_option("--api-key", opt->api.apiKey,
                   "require 'Authorization: Bearer <key>' on the API (better: set SHOAL_API_KEY; "
                   "command lines show in ps); needed beyond loopback")
      ->envname("SHOAL_API_KEY");
  serve
      ->add_option("--max-queue", opt->api.maxQueued,
                   "requests that may wait for a free slot (--parallel) before 429")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, api::kMaxQueuedRequests));
  serve
      ->add_option("--draft-max", opt->api.draftMax,
                   "most tokens drafted per step by prompt lookup (speculative decoding: greedy "
                   "replies unchanged, sampled ones keep their distribution); 0 = off")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  serve
      ->add_option("--replicas", opt->replicas,
                   "at most this many replicas of the model, each a pipeline over devices of its "
                   "own, with every request routed to the one that will answer it soonest (0: as "
                   "many as give the most throughput)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  addDraftModelOption(*serve, opt->draftModel, "auto");
  serve->callback([opt, serve] {
    // Replies at once: --parallel (the KV slots of every stage), 4 unless given, as shoal-node.
    if (serve->get_option("--parallel")->count() == 0) opt->parallel = 4;
    if (opt->parallel > static_cast<int>(api::kMaxParallel)) {
      throw CliExit{2, "--parallel: at most " + std::to_string(api::kMaxParallel) +
                           " replies at once over the API"};
    }
    runPoolServe(*opt);
  });
#endif
}

}  // namespace shoal::cli
