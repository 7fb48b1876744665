#pragma once
// Direct forwarding between the nodes of one deployment (issue 20): stage i's node sends its
// hidden states straight to stage i+1's node instead of back to the coordinator, so each stage
// costs one network leg instead of two.
//
// The coordinator introduces the two nodes, on connections both already trust:
//   1. to the downstream node, `link_accept {stage_id, from_device}`: the node mints a random
//      route token for that stage of the coordinator's and accepts TLS connections from
//      `from_device` (which it does not trust otherwise) while the route lives — `LinkRoutes`;
//   2. to the upstream node, `link_connect {stage_id, address, device_id, route}`: the node opens
//      a TLS connection to `address`, pinned to `device_id`, and presents the route
//      (`link_hello`) — a `StageLink`.
// From then on a forward with `"to_link": true` on the upstream node pushes its output down the
// link (`link_hidden`: one segment's rows, or the error that replaced them), and a forward with
// `"from_link": true` on the downstream node takes its input from the route's `LinkInbox` rather
// than from the request's blob. Both nodes still answer the coordinator every request in order;
// only the payload takes the short way.
//
// The ring (decoding ahead over several nodes): the head stage's node is linked to the first
// stage's node the same way, and a forward of the head with `"to_link": true` pushes the token it
// sampled from each segment's last row (`link_tokens`: the ids for the next position) to the
// first stage, whose forward with `"from_link": true` takes its token ids from that inbox. So
// the coordinator can send a burst of one-token forwards to every node at once and each token
// travels node to node, one leg per stage, without returning to the coordinator in between.
//
// Scope: an introduced device gets one thing, pushing hidden states into the one stage it was
// introduced for; it can load, run or read nothing, and it is forgotten (its connection closed)
// when the route is revoked: the stage unloaded or re-linked, or the coordinator's connection
// closed. Nothing of it is saved.
//
// Threading: a LinkInbox is filled by the link's session thread and emptied by the thread serving
// the coordinator's forwards; LinkRoutes is shared by every session thread of the node.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/error.h"
#include "lan/pool/forward_fields.h"  // LinkFailure
#include "lan/transport/connection.h"

namespace shoal::lan {

// Hidden-state rows waiting for a forward: at most this many full batches' worth per route (in
// rows: a batch of many sequences pushes one segment each), so that an upstream node far ahead (a
// long prompt's micro-batches) is held back by TCP instead of filling memory.
inline constexpr size_t kLinkInboxBatches = 8;
// How long a from_link forward waits for its rows unless the request says ("link_wait_ms"): the
// coordinator's own default request timeout.
inline constexpr std::chrono::milliseconds kLinkWaitDefault{30000};
// How long a link_connect may take to open the connection and be accepted.
inline constexpr std::chrono::milliseconds kLinkConnectTimeout{5000};
// Pings (link_ping, answered link_pong) a link_connect times on the new link; the least round
// trip is reported to the coordinator.
inline constexpr int kLinkPings = 5;

// One segment's rows pushed down a link.
struct LinkedRows {
  int32_t sequence = 0;
  int32_t firstPosition = 0;
  int32_t count = 0;
  std::vector<float> hidden;    // count x nEmbd (a hidden-state link)
  std::string error;            // non-empty: the upstream forward failed with this instead
  std::vector<int32_t> tokens;  // count token ids instead (the ring's link into the first stage)
};

// What arrived on one route, in order.
class LinkInbox {
 public:
  // The stage's row width and most rows per segment: what every push is checked against.
  // tokenVocab > 0: the inbox of a first stage (the ring), whose rows are token ids below it.
  LinkInbox(int32_t nEmbd, int32_t maxBatch, int32_t tokenVocab = 0)
      : m_nEmbd(nEmbd), m_maxBatch(maxBatch), m_tokenVocab(tokenVocab) {}
  int32_t nEmbd() const { return m_nEmbd; }
  int32_t maxBatch() const { return m_maxBatch; }
  int32_t tokenVocab() const { return m_tokenVocab; }  // 0: hidden-state rows
  // Queues rows; waits while kLinkInboxBatches × maxBatch rows are queued (up to `timeout`, then
  // LinkFailure).
  // Throws LinkFailure once closed.
  void push(LinkedRows rows, std::chrono::milliseconds timeout);
  // The next rows, which must be (sequence, firstPosition, count) — the link is out of step
  // otherwise (LinkFailure, and the inbox closes). Waits up to `timeout` for them; LinkFailure on
  // timeout (the inbox closes: the link is stuck), when closed, or when the upstream forward
  // failed (its message).
  LinkedRows take(int32_t sequence, int32_t firstPosition, int32_t count,
                  std::chrono::milliseconds timeout);
  // No more rows will come: pushes fail with `why`, takes get what is queued and then fail with
  // `why` (idempotent: the first reason stays). A link out of step or stuck (take's mismatch,
  // push's timeout) also drops what is queued.
  void close(const std::string& why);

 private:
  const int32_t m_nEmbd;
  const int32_t m_maxBatch;
  const int32_t m_tokenVocab;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::deque<LinkedRows> m_queue;
  size_t m_queuedRows = 0;  // of m_queue
  std::string m_closed;     // why, once closed
};

// The routes coordinators opened on this node (downstream side).
class LinkRoutes {
 public:
  // A new route into the stage `stageKey` of the coordinator connection `owner`, for
  // `fromDevice`; any earlier route into that stage is revoked. Returns the route token.
  std::string open(uint64_t owner, const std::string& stageKey, const std::string& fromDevice,
                   std::shared_ptr<LinkInbox> inbox);
  // Revokes the route into that stage (its inbox closes, its link connection is closed).
  void revoke(uint64_t owner, const std::string& stageKey, const std::string& why);
  // Whether some route accepts connections from `deviceId` (the listener's question).
  bool isIntroduced(const std::string& deviceId) const;
  // Binds the link connection `connection` of `deviceId` to the route `token` (once: a second
  // connection for a bound route is refused). Returns the inbox, or throws shoal::Error.
  std::shared_ptr<LinkInbox> bind(const std::string& token, const std::string& deviceId,
                                  Connection& connection);
  // The link connection ended: the route loses it (its inbox closes with `why`).
  void unbind(const std::string& token, const Connection& connection, const std::string& why);
  size_t size() const;

 private:
  struct Route {
    uint64_t owner = 0;
    std::string stageKey;
    std::string fromDevice;
    std::shared_ptr<LinkInbox> inbox;
    Connection* connection = nullptr;  // the bound link connection (closed on revoke)
  };
  mutable std::mutex m_mutex;
  std::map<std::string, Route> m_routes;  // by token
};

// The upstream side: an open link to the next stage's node.
class StageLink {
 public:
  StageLink(std::unique_ptr<Connection> connection, std::string route, std::string address);
  ~StageLink();  // closes the connection
  // Sends one segment's rows, its token ids (LinkedRows::tokens non-empty: the ring) or its
  // error down the link. LinkFailure when it cannot.
  void push(const LinkedRows& rows);
  const std::string& address() const { return m_address; }
  const std::string& peerDeviceId() const { return m_connection->peerDeviceId(); }
  bool isOpen() const { return m_connection->isOpen(); }

 private:
  std::unique_ptr<Connection> m_connection;
  std::string m_route;
  std::string m_address;
};

// A fresh route token: 128 random bits as hex (OpenSSL's RAND_bytes).
std::string newRouteToken();

}  // namespace shoal::lan
