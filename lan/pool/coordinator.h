#pragma once
// The pool coordinator: membership, profiling, planning, deployment, generation with recovery,
// and telemetry. It hosts no stage itself: it holds the model file (for the tokenizer, the
// planner's costs and streaming weights to nodes that lack them) and relays every hop (star
// topology, see pool_builder.h), so only token ids and hidden states cross the network.
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
};

// How one hop of the deployed pipeline (stage i -> stage i + 1) carries its hidden states.
struct PipelineHop {
  std::string fromNode;  // node names
  std::string toNode;
  bool direct = false;  // node to node; false: relayed through the coordinator
  std::string note;     // why it is relayed (empty when direct)
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

  // The planner's view of the members, and the single-pipeline plan (the home default: one
  // chat, fastest pipeline) over it.
  plan::Pool pool() const;
  plan::Plan makePlan() const;
  // Plans from now on (and re-plans) use at most this much memory of any device (0: all it has);
  // CoordinatorOptions::maxDeviceMemoryBytes at first.
  void setMaxDeviceMemory(uint64_t bytes);

  // Loads the plan's fastest pipeline (stages already loaded as asked are kept). Throws
  // TransportError / shoal::Error when a node fails to load.
  void deploy(const plan::Plan& plan, const DeployCallback& progress = {});
  std::vector<StagePlacement> deployed() const;
  // The hops of the deployed pipeline, in order (direct or relayed, and why).
  std::vector<PipelineHop> hops() const;
  double predictedTokensPerS() const;
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
  // calls `body` with the deployed pipeline's chain (options.maxSequences KV slots) and scheduler
  // options whose recovery hook repairs it as generateConcurrently()'s does — a failed node is
  // dropped, the rest re-planned and every generation replays its own tokens. The chain object
  // stays the same across repairs. It is body's alone until body returns (deploy() and
  // generate() wait); body may run a scheduler over it on another thread, where the recovery
  // then runs, but must have stopped that thread before it returns.
  using ServeBody = std::function<void(runtime::Chain& chain, runtime::SchedulerOptions options)>;
  void serve(const ServeBody& body);

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
  // The deployed pipeline's stages, in order (shared: the chain and snapshots hold them too).
  using LiveStages = std::vector<std::shared_ptr<RemoteStage>>;
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
  void deployStages(const std::vector<StagePlacement>& stages, const DeployCallback& progress);
  // Drops the failed node, re-plans over the rest and deploys the new plan (StageFailure when
  // another node fails while loading).
  void recover(const StageFailure& failure, int32_t generated);
  // The session's Recovery hook: recover() from a TransportError of the chain's stage
  // `failedStage`, then hands the session the repaired chain with empty caches. false for any
  // other error (it reaches the caller).
  bool recoverStage(const std::exception& error, size_t failedStage);
  // Introduces each deployed stage's node to the next one's (direct forwarding) and records in
  // m_hops which hops are direct.
  void linkHops();
  // m_chain over the deployed stages (replaced in place: the session keeps a reference): the
  // stages of consecutive direct hops form one LinkedStages.
  void rebuildChain();
  // The node of the chain stage's part that failed last.
  std::string failedNodeOf(size_t chainStage) const;
  // recover() from a TransportError of stage `failedStage`, rebuildChain(), and empty `slots`
  // sequences of every stage (those the new plan kept still hold them). false for other errors.
  bool repairChain(const std::exception& error, size_t failedStage, int32_t generated,
                   int32_t slots);

  Connector m_connector;
  CoordinatorOptions m_options;

  std::mutex m_runMutex;  // one deploy() or generate() at a time (one KV sequence)
  runtime::ModelDrafter* m_drafter = nullptr;  // generate()'s draft model (under m_runMutex)
  mutable std::mutex m_mutex;  // guards the members, the deployment and the recoveries
  std::map<std::string, Member> m_members;
  std::vector<std::string> m_memberOrder;  // join order: the pool's device order

  std::unique_ptr<model::Model> m_model;
  ModelIdentity m_modelIdentity;
  plan::ModelCost m_modelCost;
  LiveStages m_stages;
  std::vector<PipelineHop> m_hops;  // m_stages.size() - 1 of them
  double m_predictedTokensPerS = 0;
  uint64_t m_nextStage = 1;
  std::vector<RecoveryEvent> m_recoveries;

  // Generation (under m_runMutex): the session over a chain of the deployed stages, kept from
  // one generate() to the next (prompt-prefix reuse) until a deploy or a failure.
  std::unique_ptr<runtime::Chain> m_chain;
  // m_chain's stages, in order: groups of deployed stages linked node to node.
  std::vector<std::shared_ptr<LinkedStages>> m_chainStages;
  std::unique_ptr<runtime::Session> m_session;
  size_t m_promptTokens = 0;  // of the generation running

  std::thread m_telemetryThread;
  std::mutex m_telemetryMutex;
  std::condition_variable m_telemetryWake;
  bool m_telemetryStop = false;
};

}  // namespace shoal::lan
