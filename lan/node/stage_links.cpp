#include "lan/node/stage_links.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cstring>

namespace shoal::lan {

void LinkInbox::push(LinkedRows rows, std::chrono::milliseconds timeout) {
  std::unique_lock lock(m_mutex);
  const size_t most = kLinkInboxBatches * size_t(m_maxBatch);
  const bool room = m_changed.wait_for(lock, timeout, [&] {
    return !m_closed.empty() || m_queue.empty() ||
           m_queuedRows + size_t(std::max(rows.count, 0)) <= most;
  });
  if (!m_closed.empty()) throw LinkFailure(m_closed);
  if (!room) {
    m_closed = std::string("the stage took no ") + (m_tokenVocab ? "tokens" : "hidden states") +
               " from its link for " + std::to_string(timeout.count()) + " ms";
    m_queue.clear();  // the link is dropped: what it brought is out of step from here on
    m_queuedRows = 0;
    m_changed.notify_all();
    throw LinkFailure(m_closed);
  }
  m_queuedRows += size_t(std::max(rows.count, 0));
  m_queue.push_back(std::move(rows));
  m_changed.notify_all();
}

LinkedRows LinkInbox::take(int32_t sequence, int32_t firstPosition, int32_t count,
                           std::chrono::milliseconds timeout) {
  std::unique_lock lock(m_mutex);
  const bool arrived =
      m_changed.wait_for(lock, timeout, [&] { return !m_queue.empty() || !m_closed.empty(); });
  if (!m_queue.empty()) {
    LinkedRows rows = std::move(m_queue.front());
    m_queue.pop_front();
    m_queuedRows -= size_t(std::max(rows.count, 0));
    m_changed.notify_all();
    if (rows.sequence != sequence || rows.firstPosition != firstPosition || rows.count != count) {
      m_closed = "link out of step: expected sequence " + std::to_string(sequence) + " rows [" +
                 std::to_string(firstPosition) + ", " + std::to_string(firstPosition + count) +
                 "), got sequence " + std::to_string(rows.sequence) + " rows [" +
                 std::to_string(rows.firstPosition) + ", " +
                 std::to_string(rows.firstPosition + rows.count) + ")";
      m_queue.clear();
      m_queuedRows = 0;
      throw LinkFailure(m_closed);
    }
    if (!rows.error.empty()) throw LinkFailure("the previous stage failed: " + rows.error);
    return rows;
  }
  if (!m_closed.empty()) throw LinkFailure(m_closed);
  (void)arrived;
  // A link that brought nothing in time is stuck (its node stopped, say): it closes, so that the
  // forwards queued behind this one (a burst round the ring) fail at once instead of each
  // waiting as long, which would keep the node from answering its coordinator for minutes.
  m_closed = std::string(m_tokenVocab ? "no tokens from the head stage's link"
                                      : "no hidden states from the previous stage's link") +
             " within " + std::to_string(timeout.count()) + " ms";
  m_changed.notify_all();
  throw LinkFailure(m_closed);
}

void LinkInbox::close(const std::string& why) {
  std::lock_guard lock(m_mutex);
  if (m_closed.empty()) m_closed = why.empty() ? std::string("link closed") : why;
  m_changed.notify_all();
}

std::string LinkRoutes::open(uint64_t owner, const std::string& stageKey,
                             const std::string& fromDevice, std::shared_ptr<LinkInbox> inbox) {
  revoke(owner, stageKey, "the stage was linked again");
  std::string token = newRouteToken();
  std::lock_guard lock(m_mutex);
  m_routes[token] = Route{owner, stageKey, fromDevice, std::move(inbox), nullptr};
  return token;
}

void LinkRoutes::revoke(uint64_t owner, const std::string& stageKey, const std::string& why) {
  std::lock_guard lock(m_mutex);
  for (auto it = m_routes.begin(); it != m_routes.end();) {
    if (it->second.owner == owner && it->second.stageKey == stageKey) {
      it->second.inbox->close(why);
      if (it->second.connection) it->second.connection->close();
      it = m_routes.erase(it);
    } else {
      ++it;
    }
  }
}

bool LinkRoutes::isIntroduced(const std::string& deviceId) const {
  std::lock_guard lock(m_mutex);
  for (const auto& [token, route] : m_routes) {
    if (route.fromDevice == deviceId) return true;
  }
  return false;
}

std::shared_ptr<LinkInbox> LinkRoutes::bind(const std::string& token, const std::string& deviceId,
                                            Connection& connection) {
  std::lock_guard lock(m_mutex);
  const auto it = m_routes.find(token);
  // One message for every refusal: a peer learns nothing about routes not its own.
  if (it == m_routes.end() || it->second.fromDevice != deviceId || it->second.connection) {
    throw Error("no route " + token.substr(0, 40) + " for device " + deviceId);
  }
  it->second.connection = &connection;
  return it->second.inbox;
}

void LinkRoutes::unbind(const std::string& token, const Connection& connection,
                        const std::string& why) {
  std::lock_guard lock(m_mutex);
  const auto it = m_routes.find(token);
  if (it == m_routes.end() || it->second.connection != &connection) return;
  it->second.connection = nullptr;
  it->second.inbox->close(why);
}

size_t LinkRoutes::size() const {
  std::lock_guard lock(m_mutex);
  return m_routes.size();
}

StageLink::StageLink(std::unique_ptr<Connection> connection, std::string route, std::string address)
    : m_connection(std::move(connection)),
      m_route(std::move(route)),
      m_address(std::move(address)) {}

StageLink::~StageLink() { m_connection->close(); }

void StageLink::push(const LinkedRows& rows) {
  Message m;
  const bool tokens = !rows.tokens.empty();
  m.control = {{"op", tokens ? "link_tokens" : "link_hidden"},
               {"sequence", rows.sequence},
               {"first_position", rows.firstPosition},
               {"count", rows.count}};
  if (!rows.error.empty()) {
    m.control["error"] = rows.error;
  } else if (tokens) {
    m.blob.resize(rows.tokens.size() * sizeof(int32_t));
    std::memcpy(m.blob.data(), rows.tokens.data(), m.blob.size());
  } else {
    m.blob.resize(rows.hidden.size() * sizeof(float));
    if (!m.blob.empty()) std::memcpy(m.blob.data(), rows.hidden.data(), m.blob.size());
  }
  try {
    m_connection->send(m);
  } catch (const TransportError& e) {
    throw LinkFailure("link to " + m_address + " lost: " + e.what());
  }
}

std::string newRouteToken() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) throw Error("link: RAND_bytes failed");
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace shoal::lan
