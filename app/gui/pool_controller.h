#pragma once
// PoolController: the app's side of the LAN pool — its coordinator identity, LAN discovery (the
// app announces itself as a pool member under the node name from Settings), a
// lan::Coordinator over the nodes the user adds or pairs with, and, when this computer is shared,
// an in-process lan::NodeService that hosts stages on this machine's devices like any node.
//
// Threading contract (the same as ChatEngine's, chat_engine.h)
// ------------------------------------------------------------
// - A PoolController lives on its own QThread (PoolControllerThread creates both). Its slots
//   are invoked queued from the GUI; they may block (connecting, profiling links, planning,
//   streaming weights) because they run there, never on the GUI thread. They run one at a time,
//   so a request queued behind a deployment waits for it.
// - Every result comes back as a signal. Some are emitted from other threads: peersChanged from
//   the discovery thread and snapshot from the coordinator's telemetry thread (every 500 ms once
//   a node is a member). Receivers on the GUI thread therefore get all of them queued.
// - It is a ReplyEngine (reply_engine.h): once a model is deployed, replies are requested with
//   requestReply() and stopped with stop(), the two methods safe to call from any thread.

#include <QList>
#include <QObject>
#include <QStringList>
#include <memory>
#include <mutex>
#include <string>

#include "app/gui/chat_types.h"
#include "app/gui/pool_types.h"
#include "app/gui/reply_engine.h"
#include "app/gui/worker_thread.h"
#include "engine/plan/types.h"

namespace shoal::lan {
class Coordinator;
class Discovery;
class Listener;
class NodeService;
class TrustStore;
struct Identity;
}  // namespace shoal::lan
namespace shoal::plan {
struct Plan;
}

namespace shoal::gui {

// Replies with the deployed pipeline: the coordinator's model and chain, the pool's context.
class PoolController : public ReplyEngine {
  Q_OBJECT

 public:
  explicit PoolController(QObject* parent = nullptr);
  ~PoolController() override;

  // The pool's config directory of an app data directory: <dataDir>/pool.
  static QString configDirOf(const QString& dataDirectory);
  // The planner's view of the pool's members as of the last node added or forgotten (no devices
  // before any): what the Models page's "Pool" fit column plans on. Thread-safe (the GUI thread
  // reads it while this one works).
  plan::Pool currentPool() const;

 public slots:
  // Loads (or creates) the identity and trust store in configDir, opens the listener discovery
  // advertises, and starts discovery unless `discovery` is false, announcing nodeName (empty:
  // the host name; also the name paired nodes store for us). maxDeviceMemoryBytes caps what
  // any pooled device may give (0: what it has free). Emits started or failed.
  void start(const QString& configDir, const QString& nodeName, bool discovery,
             qint64 maxDeviceMemoryBytes);
  // Shares this computer's devices with the pool: starts a node in this process (its own
  // identity in <configDir>/node, trusted both ways with the coordinator, any free port,
  // GGUF files from modelsDir), announces it instead of the coordinator, and adds it. Emits
  // nodeAdded (address 127.0.0.1:port) or failed.
  void shareThisComputer(const QString& modelsDir);
  // Lets other computers pair with this one ("Let other computers use this one"): a fresh code
  // for this computer's node (the one shareThisComputer started), valid for validForSeconds; an
  // earlier code stops working. A coordinator elsewhere (`shoal-cli pool pair HOST:PORT CODE`,
  // or its app) types it in and is trusted by the node from then on. Emits pairingCodeReady, or
  // failed when this computer is not shared.
  void showPairingCode(int validForSeconds);
  // The name discovery announces (Settings' node name; empty: the host name). Takes effect at
  // once when discovery runs: it restarts with the new name.
  void setNodeName(const QString& nodeName);
  // Connects to a trusted node at "host:port" and adds it to the pool (links profiled). Emits
  // nodeAdded, or failed naming the address.
  void addNode(const QString& address);
  // Pairs with the node at "host:port" using the code it shows, then adds it. Emits paired and
  // nodeAdded, or failed.
  void pair(const QString& address, const QString& code);
  // Un-pairs a device: removes it from the trust store (trusted.json, shared with shoal-cli and
  // any process on the same config dir) and, when it is a member, takes it out of the pool (its
  // stages are lost to the pipeline: preview the plan again). Emits forgotten and
  // trustedDevicesChanged, or failed.
  void forget(const QString& deviceId);
  // Plans the pool for the GGUF model at modelPath (opened here; it must be readable by this
  // machine: the coordinator streams its weights to nodes that lack it). Emits planReady.
  void previewPlan(const QString& modelPath);
  // Deploys the last previewed plan, reporting weight transfer through deployProgress. Emits
  // deployed or failed.
  void deploy();

 signals:
  void started(const QString& deviceId, int listenPort);
  void failed(const QString& what);
  void peersChanged(const QList<shoal::gui::DiscoveredNode>& peers);
  void paired(const QString& deviceId, const QString& address);
  // The devices the trust store lists (trusted is true, address empty), after start, pairing,
  // sharing this computer and forgetting.
  void trustedDevicesChanged(const QList<shoal::gui::DiscoveredNode>& devices);
  void forgotten(const QString& deviceId);
  void nodeAdded(const QString& deviceId, const QString& name, const QString& address);
  // This computer's node is up (shareThisComputer): the device ID other coordinators pair with
  // and pin, the TCP port it listens on (every IPv4 address), and "host:port" for each address
  // of an interface that is up, LAN ones first, loopback last.
  void sharing(const QString& nodeDeviceId, int port, const QStringList& addresses);
  // A pairing code of this computer's node: "ABCD-EFGH", valid until expiresAtMs (milliseconds
  // since the epoch, QDateTime::currentMSecsSinceEpoch's clock).
  void pairingCodeReady(const QString& code, qint64 expiresAtMs);
  void planReady(const shoal::gui::PlanPreview& preview);
  void deployProgress(const shoal::gui::DeployStatus& status);
  void deployed(const shoal::gui::PlanPreview& plan);
  void snapshot(const shoal::lan::PoolSnapshot& snapshot);

 protected:
  ReplyTarget replyTarget() const override;
  runtime::GenerateResult runReply(const std::vector<int32_t>& prompt,
                                   const runtime::GenerateOptions& options,
                                   const std::function<bool(std::string_view)>& onText) override;

 private:
  void ensureTelemetry();
  void emitTrustedDevices();
  void startDiscovery();
  PlanPreview previewOf(const plan::Plan& plan) const;
  void updateCurrentPool();

  std::unique_ptr<lan::Identity> m_identity;
  std::unique_ptr<lan::TrustStore> m_trust;
  QString m_configDir;
  std::unique_ptr<lan::Listener> m_listener;      // advertised while this computer is not shared
  std::unique_ptr<lan::NodeService> m_localNode;  // this computer as a pool member, when shared
  std::unique_ptr<lan::Discovery> m_discovery;
  std::unique_ptr<lan::Coordinator> m_coordinator;
  std::unique_ptr<plan::Plan> m_plan;  // the last preview
  QString m_modelPath;                 // the model set on the coordinator
  QString m_nodeName;
  bool m_telemetry = false;
  mutable std::mutex m_poolMutex;  // guards m_currentPool (currentPool() is called from the GUI)
  plan::Pool m_currentPool;
};

// Owns a PoolController and the QThread it runs on. Destroying it stops a running reply, joins
// the thread (a deployment runs to its end) and deletes the controller.
class PoolControllerThread : public WorkerThread<PoolController> {
 public:
  PoolControllerThread() : WorkerThread("shoal-pool") {}
  PoolController* controller() const { return worker(); }
};

}  // namespace shoal::gui
