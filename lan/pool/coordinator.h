#pragma once
// The pool coordinator: membership, profiling, planning, deployment, generation with recovery,
// and telemetry. It hosts no stage itself: it holds the model file (for the tokenizer, the
// planner's costs and streaming weights to nodes that lack them) and relays the hops whose nodes
// cannot link directly (star topology, see pool_builder.h), so only token ids and hidden states
// cross the network.
//
// Replicas: a plan may hold several pipelines (CoordinatorOptions::maxPipelines); deploy() loads
// them all, each a replica of the whole model on its own devices. generate() and
// generateConcurrently() run on the first; serve() hands every replica to a scheduler of its own
// and routeRequest() picks, per request, the replica that will answer it soonest (the planner's
// phase 2, engine/plan/routing.h, over live load).
//
// Threading: the public methods may be called from any thread; generation and deployment block
// (the GUI never calls them on its own thread) and are serialized: one runs at a time. The
// telemetry poller runs on a thread of its own and reports through the callback from it.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/model.h"
#include "engine/plan/types.h"
#include "engine/runtime/scheduler.h"
#include "engine/runtime/session.h"
#include "lan/pool/linked_stages.h"
#include "lan/pool/node_client.h"
#include "lan/pool/node_info.h"
#include "lan/pool/pool_builder.h"
#include "lan/pool/remote_stage.h"
#include "lan/pool/telemetry.h"
#include "lan/transport/connection.h"

namespace shoal::lan {

// Opens an authenticated connection to "host:port" (the transport's connectTo in production, an
// in-process fake in tests). Throws TransportError.
using Connector = std::function<std::unique_ptr<Connection>(const std::string& address)>;

struct CoordinatorOptions {
  std::chrono::milliseconds requestTimeout{30000};  // one request/reply (ping, forward, ...)
  std::chrono::milliseconds loadTimeout{600000};    // a stage load, weights streamed included
  int pingSamples = 5;                              // RTT = median of this many pings
  size_t bandwidthProbeBytes = 1u << 20;            // 0: do not probe bandwidth
  int32_t contextLength = 2048;                     // KV capacity of every stage, per sequence
  // Sequences every stage holds KV caches for (the planner's S): how many generations
  // generateConcurrently() runs at once; more wait for a slot.
  int32_t maxSequences = 1;
  // Replicas a plan may hold (plan::PlanOptions::maxPipelines): 1, one pipeline over the devices
  // that make one chat fastest (the home default); 0, as many as give the most throughput
  // (serving many clients); N, at most N.
  int maxPipelines = 1;
  int32_t maxBatch = 256;  // prompt tokens per forward (bounds a hidden-state frame)
  // Most memory the pool may use on any one device (0: what the node reports free). Lets a
  // user keep part of each machine for other work (and tests force a model over several nodes).
  uint64_t maxDeviceMemoryBytes = 0;
  std::function<void(const std::string&)> log;  // progress and recovery lines (may be empty)
  // Whether a device is still trusted (the app's TrustStore::isTrusted). Asked for every member
  // at each telemetry poll, so a node forgotten by another process on the same config directory
  // (`shoal-cli pool forget`) leaves the pool at once, as the node side drops its sessions.
  // Empty: members stay until removed.
  std::function<bool(const std::string& deviceId)> isTrusted;
  // Direct forwarding (lan/node/stage_links.h): after a deploy the coordinator introduces each
  // stage's node to the next one, which then receives the hidden states straight from it; a hop
  // whose nodes cannot link is relayed through the coordinator. false: relay every hop.
  bool directForwarding = true;
  // The ring (lan/node/stage_links.h): when every hop of a pipeline of several nodes is direct,
  // the head's node is also linked to the first node, so a single stream decodes ahead over the
  // pipeline (LinkedStages::decodeAhead) with no coordinator round trip per token. false: every
  // token of such a pipeline returns to the coordinator before the next is sent.
  bool decodeRing = true;
};

// How one hop of the deployed pipeline (stage i -> stage i + 1) carries its hidden states.
struct PipelineHop {
  std::string fromNode;  // node names
  std::string toNode;
  bool direct = false;  // node to node; false: relayed through the coordinator
  std::string note;     // why it is relayed (empty when direct)
  double rttS = 0;      // the round trip the upstream node measured on the link (0: unknown)
};

struct DeployProgress {
  size_t stage = 0;  // 0-based, of `stages`
  size_t stages = 0;
  std::string nodeName;
  uint64_t bytesSent = 0;  // weights streamed for this stage so far
  uint64_t bytesTotal = 0;
  bool done = false;  // the stage is ready
};
using DeployCallback = std::function<void(const DeployProgress&)>;

// One recovery from a stage failure during generation.
struct RecoveryEvent {
  size_t replica = 0;  // which replica lost the node
  std::string failedNodeId;
  std::string failedNodeName;
  std::string cause;            // the transport error
  int32_t generatedBefore = 0;  // tokens of the reply generated when the node failed
  double seconds = 0;           // from the failure to the pipeline being ready again
  double movedBytes = 0;        // the re-plan's weight bytes to load
};

class Coordinator {
 public:
  explicit Coordinator(Connector connector, CoordinatorOptions options = {});
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Connects, asks node_info and adds the node; returns its device ID. Throws TransportError
  // when unreachable, shoal::Error when it misbehaves or is already a member.
  std::string addNode(const std::string& address);
  // Closes the connection and forgets the node (its stages are lost to the pipeline).
  void removeNode(const std::string& nodeId);
  std::vector<NodeInfo> nodes() const;

  // Measures RTT (median of pingSamples) and bandwidth of the link to every member.
  void profileLinks();
  std::vector<NodeLinkProfile> links() const;

  // The model to run (opened, hashed, costed for contextLength). Throws shoal::Error.
  void setModel(const std::filesystem::path& ggufPath);
  const model::Model& model() const;
  const plan::ModelCost& modelCost() const { return m_modelCost; }

  // The planner's view of the members, and the plan over it (at most
  // CoordinatorOptions::maxPipelines replicas; one by default: the fastest pipeline for one chat).
  plan::Pool pool() const;
  plan::Plan makePlan() const;
  // Plans from now on (and re-plans) use at most this much memory of any device (0: all it has);
  // CoordinatorOptions::maxDeviceMemoryBytes at first.
  void setMaxDeviceMemory(uint64_t bytes);

  // Loads every pipeline of the plan, a replica each (stages already loaded as asked are
  // kept). Throws TransportError / shoal::Error when a node fails to load.
  void deploy(const plan::Plan& plan, const DeployCallback& progress = {});
  // Replicas deployed (one retired after losing a node counts, with no stages).
  size_t replicaCount() const;
  // The stages of a replica, in order (the first by default: the one generate() uses).
  std::vector<StagePlacement> deployed(size_t replica = 0) const;
  // The hops of a replica's pipeline, in order (direct or relayed, and why).
  std::vector<PipelineHop> hops(size_t replica = 0) const;
  // The ring's link from the replica's head node back to its first node: `direct` when linked
  // (its fromNode/toNode empty for a pipeline of one stage or with a relayed hop).
  PipelineHop ring(size_t replica = 0) const;
  // The planner's throughput of the replicas deployed (their sum, X), or of one of them.
  double predictedTokensPerS() const;
  double predictedTokensPerS(size_t replica) const;
  // The cost model's time to the first token of a `promptTokens`-token prompt on the deployed
  // pipeline (plan::prefillTimeS, in micro-batches of CoordinatorOptions::maxBatch); 0 when
  // nothing is deployed.
  double predictedTtftS(int promptTokens) const;

  // Generates a reply to `prompt` on the deployed pipeline: runtime::Session over a Chain of
  // the RemoteStages. The last stage samples on its node (greedy when
  // options.sampler.temperature <= 0; the repetition penalty is not applied remotely). A prompt
  // that extends the previous one computes only its new tokens (the session's cache). When a
  // node fails mid-way (TransportError) the session's recovery hook drops it, re-plans over the
  // rest and loads the missing layers; the session replays the prompt and the reply so far and
  // continues: the greedy reply is unchanged. Throws when no plan is left or the model is not
  // deployed.
  runtime::GenerateResult generate(const std::vector<model::TokenId>& prompt,
                                   const runtime::GenerateOptions& options,
                                   const runtime::Session::TextCallback& onText = {});
  std::vector<RecoveryEvent> recoveries() const;
  // A draft model for generate()'s speculative decoding (runtime::Session::setDrafter), or
  // nullptr. Not owned; it must outlive the generations that use it.
  void setDrafter(runtime::ModelDrafter* drafter);

  // Several generations at once on the deployed pipeline (continuous batching,
  // engine/runtime/scheduler.h): up to options.maxSequences share each step, split into as many
  // batches as there are stages so that every node works at once; the rest wait for a slot.
  // Greedy rows are sampled on the last node; others bring their logits back. A node that fails
  // mid-way is recovered from as in generate() and every generation replays only its own
  // tokens: greedy replies are unchanged. Blocks until all have finished; onText callbacks run
  // on the calling thread.
  struct PoolRequest {
    std::vector<model::TokenId> prompt;
    runtime::GenerateOptions options;
    runtime::Session::TextCallback onText;
  };
  struct PoolReply {
    runtime::GenerateResult result;
    std::string error;  // non-empty when this generation failed
  };
  std::vector<PoolReply> generateConcurrently(const std::vector<PoolRequest>& requests);

  // Serving clients that come and go (the OpenAI API over the pool, `shoal-cli pool serve`):
  // calls `body` with each replica's chain (options.maxSequences KV slots) and scheduler options
  // whose recovery hook repairs it as generateConcurrently()'s does — a failed node is dropped,
  // the rest re-planned and every generation replays its own tokens. A chain object stays the
  // same across repairs. The chains are body's alone until body returns (deploy() and
  // generate() wait); body may run a scheduler over each on a thread of its own, where the
  // recovery then runs, but must have stopped those threads before it returns.
  //
  // With several replicas, a replica's recovery repairs only it, from its surviving devices and
  // the spare ones; when they cannot hold the model the replica is retired: its hook fails its
  // generations and routeRequest() passes it over from then on.
  struct ServedReplica {
    runtime::Chain* chain = nullptr;
    runtime::SchedulerOptions options;  // the recovery hook
  };
  using ServeBody = std::function<void(std::vector<ServedReplica>& replicas)>;
  void serve(const ServeBody& body);

  // The live load of one replica, as its scheduler's queue sees it.
  struct ReplicaLoad {
    int sequences = 0;  // generations running or waiting on it
    // Measured seconds per token of one of its generations (its steps' wall time, each running
    // generation counted, over the tokens they produced); 0 until measured.
    double measuredSecondsPerToken = 0;
  };
  // Phase 2: the index of the replica a new request should join (plan::chooseReplica over each
  // replica's stages, their planned times scaled to what was measured, stretched by the load);
  // -1 when none is left. `loads` has one entry per replica, in deploy order.
  int routeRequest(const std::vector<ReplicaLoad>& loads) const;
  // One telemetry poll of every member (telemetry + ping) now; first removes the members whose
  // device options.isTrusted no longer trusts.
  PoolSnapshot pollSnapshot();
  // Polls every `interval` on a thread of its own until stopTelemetry() (or destruction).
  void startTelemetry(std::function<void(const PoolSnapshot&)> onSnapshot,
                      std::chrono::milliseconds interval = std::chrono::milliseconds(500));
  void stopTelemetry();

 private:
  struct Member {
    std::string address;
    NodeInfo info;
    std::shared_ptr<NodeClient> client;
    NodeLinkProfile link;
  };
  // A pipeline's stages, in order (shared: the chain and snapshots hold them too).
  using LiveStages = std::vector<std::shared_ptr<RemoteStage>>;
  // One deployed pipeline.
  struct Replica {
    // Under m_mutex:
    LiveStages stages;
    std::vector<PipelineHop> hops;  // stages.size() - 1 of them
    PipelineHop ring;               // head -> first (linkHops)
    double predictedTokensPerS = 0;
    bool retired = false;  // lost a node and could not be rebuilt: no stages, never routed to
    // Its driver's alone (generate()'s session or one serving scheduler, under m_runMutex): the
    // chain over its stages, kept across generations (prompt-prefix reuse) until a deploy or
    // a failure, and the chain's stages: groups of deployed stages linked node to node.
    std::unique_ptr<runtime::Chain> chain;
    std::vector<std::shared_ptr<LinkedStages>> chainStages;
  };
  // A node failed (TransportError) while loading a stage.
  struct StageFailure {
    std::string nodeId;
    std::string cause;
  };

  void log(const std::string& line) const;
  // What the members hold of the model for a plan to reuse (cached_layout.h): their cached
  // shards, plus the stages deployed on them now (loading the same range again keeps them).
  std::vector<NodeInfo> holdings() const;
  std::shared_ptr<NodeClient> clientOf(const std::string& nodeId) const;
  std::string nodeName(const std::string& nodeId) const;
  // removeNode() for every member options.isTrusted no longer trusts (asked without m_mutex).
  void dropUntrustedMembers();
  // The pool of the members but those in `excluded` (node ids), capped as pool() is.
  plan::Pool poolWithout(const std::vector<std::string>& excluded) const;
  // Loads `want`, keeping the stages of `before` loaded exactly as wanted and unloading the
  // others first; returns the stages of `want`, in order. Throws StageFailure (or
  // shoal::Error); `unloadedAny` then tells whether stages of `before` are gone.
  LiveStages loadStages(const LiveStages& before, const std::vector<StagePlacement>& want,
                        const DeployCallback& progress, bool& unloadedAny);
  // Drops the failed node, re-plans the replica over its surviving devices and the spare ones
  // (on no other replica) and deploys it (StageFailure when another node fails while loading;
  // shoal::Error, the replica retired, when they cannot hold the model).
  void recover(const StageFailure& failure, int32_t generated, size_t replica);
  // The session's Recovery hook: recover() from a TransportError of the chain's stage
  // `failedStage`, then hands the session the repaired chain with empty caches. false for any
  // other error (it reaches the caller).
  bool recoverStage(const std::exception& error, size_t failedStage);
  // Introduces each stage's node of the replica to the next one's (direct forwarding) and
  // records in its hops which are direct, and the round trips the nodes measured on their links
  // (m_pairRtts, then the replica's predicted throughput from them: refreshPrediction).
  void linkHops(size_t replica);
  // The replica's predicted throughput, its deployed stages evaluated on the pool as known now.
  void refreshPrediction(size_t replica);
  // The replica's chain over its stages (replaced in place: a session or scheduler keeps a
  // reference): the stages of consecutive direct hops form one LinkedStages.
  void rebuildChain(size_t replica);
  // Drops every replica's chain: the next generation starts over.
  void resetChains();
  // The node of the chain stage's part that failed last.
  std::string failedNodeOf(size_t replica, size_t chainStage) const;
  // recover() from a TransportError of stage `failedStage`, rebuildChain(), and empty `slots`
  // sequences of every stage (those the new plan kept still hold them). false for other errors.
  bool repairChain(size_t replica, const std::exception& error, size_t failedStage,
                   int32_t generated, int32_t slots);

  Connector m_connector;
  CoordinatorOptions m_options;

  std::mutex m_runMutex;  // one deploy() or generate() at a time (one KV sequence)
  runtime::ModelDrafter* m_drafter = nullptr;  // generate()'s draft model (under m_runMutex)
  // One recovery at a time: replicas served at once may fail at once, and each re-plans over
  // the devices that no other replica uses.
  std::mutex m_recoverMutex;
  mutable std::mutex m_mutex;  // guards the members, the deployment and the recoveries
  std::map<std::string, Member> m_members;
  std::vector<std::string> m_memberOrder;  // join order: the pool's device order
  NodePairRtts m_pairRtts;  // measured by the nodes on their links (linkHops), kept for plans

  std::unique_ptr<model::Model> m_model;
  ModelIdentity m_modelIdentity;
  plan::ModelCost m_modelCost;
  // The deployed replicas. The vector changes only in deploy() (under m_runMutex and m_mutex);
  // each Replica's fields as it says.
  std::vector<std::unique_ptr<Replica>> m_replicas;
  uint64_t m_nextStage = 1;
  std::vector<RecoveryEvent> m_recoveries;

  // generate()'s session over the first replica's chain (under m_runMutex), kept from one
  // generate() to the next (prompt-prefix reuse) until a deploy or a failure.
  std::unique_ptr<runtime::Session> m_session;
  size_t m_promptTokens = 0;  // of the generation running

  std::thread m_telemetryThread;
  std::mutex m_telemetryMutex;
  std::condition_variable m_telemetryWake;
  bool m_telemetryStop = false;
};

}  // namespace shoal::lan
