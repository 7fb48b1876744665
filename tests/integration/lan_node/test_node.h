#pragma once
// A NodeHost (the shoal-node stage host) in the test's process, serving each connection a test
// opens on a thread of its own over in-memory connections (memory_connection.h): what the
// node-protocol tests (test_node_host, test_remote_stage) run their RemoteStages against.

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "lan/node/node_host.h"
#include "lan/pool/node_client.h"
#include "tests/integration/lan_node/memory_connection.h"

namespace shoal::lan::test {

// One CPU thread, in the nodes and in the tests' local references alike, so sums are taken in
// the same order.
inline constexpr int kTestNodeThreads = 1;

// A NodeHost and the threads serving its connections.
class TestNode {
 public:
  // shardCacheMaxBytes 0: the default cap; backend null: the CPU backend.
  TestNode(const std::string& name, const std::filesystem::path& configDir,
           const std::filesystem::path& modelsDir, uint64_t shardCacheMaxBytes = 0,
           std::unique_ptr<runtime::Backend> backend = nullptr) {
    std::vector<std::unique_ptr<runtime::Backend>> backends;
    backends.push_back(backend ? std::move(backend)
                               : std::make_unique<cpu::CpuBackend>(kTestNodeThreads));
    NodeHostOptions o;
    o.name = name;
    o.deviceId = "ID-" + name;
    o.configDir = configDir;
    o.shardCacheMaxBytes = shardCacheMaxBytes;
    m_host = std::make_unique<NodeHost>(o, std::move(backends),
                                        std::make_shared<ModelCatalog>(modelsDir, configDir));
  }
  ~TestNode() {
    m_stop = true;
    for (auto& t : m_threads) t.join();
  }
  // A new connection to this node from the coordinator with device ID `coordinatorId`, served
  // on a thread of its own.
  std::shared_ptr<Connection> connect(const std::string& coordinatorId = "coordinator") {
    auto [client, server] = memoryConnectionPair(m_host ? "node" : "", coordinatorId);
    m_threads.emplace_back([this, server = server] { m_host->serve(*server, m_stop); });
    return client;
  }
  // The same, owned by the caller: what a Coordinator's Connector returns.
  std::unique_ptr<Connection> connectOwned(const std::string& coordinatorId = "coordinator") {
    auto shared = std::make_shared<MemoryConnection::Shared>();
    auto server = std::make_shared<MemoryConnection>(shared, 1, coordinatorId);
    m_threads.emplace_back([this, server] { m_host->serve(*server, m_stop); });
    return std::make_unique<MemoryConnection>(shared, 0, m_host->deviceId());
  }
  // A coordinator's client on a new connection.
  std::shared_ptr<NodeClient> client(const std::string& coordinatorId = "coordinator") {
    return std::make_shared<NodeClient>(connect(coordinatorId), std::chrono::seconds(60));
  }
  NodeHost& host() { return *m_host; }

 private:
  std::unique_ptr<NodeHost> m_host;
  std::atomic<bool> m_stop{false};
  std::vector<std::thread> m_threads;
};

}  // namespace shoal::lan::test
