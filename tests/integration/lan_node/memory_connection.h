#pragma once
// Two in-process Connection ends joined back to back: what one sends the other receives. Lets
// tests run the node protocol (NodeHost, RemoteStage) without sockets or TLS.

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include "lan/transport/connection.h"

namespace shoal::lan::test {

class MemoryConnection final : public Connection {
 public:
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<Message> queues[2];
    bool closed = false;
  };

  MemoryConnection(std::shared_ptr<Shared> shared, int side, std::string peerId)
      : m_shared(std::move(shared)), m_side(side), m_peerId(std::move(peerId)) {}
  ~MemoryConnection() override { close(); }

  void send(const Message& message, std::chrono::milliseconds) override {
    std::lock_guard lock(m_shared->mutex);
    if (m_shared->closed) throw TransportError(TransportError::Kind::Closed, "memory: closed");
    m_shared->queues[1 - m_side].push_back(message);
    m_stats.messagesSent++;
    m_stats.bytesSent += message.blob.size();
    m_shared->changed.notify_all();
  }

  Message receive(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(m_shared->mutex);
    auto& q = m_shared->queues[m_side];
    if (!m_shared->changed.wait_for(lock, timeout,
                                    [&] { return !q.empty() || m_shared->closed; })) {
      throw TransportError(TransportError::Kind::Timeout, "memory: timeout");
    }
    if (q.empty()) throw TransportError(TransportError::Kind::Closed, "memory: closed");
    Message m = std::move(q.front());
    q.pop_front();
    m_stats.messagesReceived++;
    m_stats.blobBytesReceived += m.blob.size();
    return m;
  }

  const std::string& peerDeviceId() const override { return m_peerId; }
  const std::string& peerAddress() const override { return m_peerId; }
  void close() override {
    std::lock_guard lock(m_shared->mutex);
    m_shared->closed = true;
    m_shared->changed.notify_all();
  }
  bool isOpen() const override {
    std::lock_guard lock(m_shared->mutex);
    return !m_shared->closed;
  }
  ConnectionStats stats() const override { return m_stats; }

 private:
  std::shared_ptr<Shared> m_shared;
  int m_side;
  std::string m_peerId;
  ConnectionStats m_stats;
};

// {coordinator end, node end}: `name` is the node's device ID as the coordinator end reports it,
// `coordinatorId` the coordinator's as the node end reports it (what TLS would have verified).
inline std::pair<std::shared_ptr<Connection>, std::shared_ptr<Connection>> memoryConnectionPair(
    const std::string& name, const std::string& coordinatorId = "coordinator") {
  auto shared = std::make_shared<MemoryConnection::Shared>();
  return {std::make_shared<MemoryConnection>(shared, 0, name),
          std::make_shared<MemoryConnection>(shared, 1, coordinatorId)};
}

}  // namespace shoal::lan::test
