// shoal_link_emulator: a TCP relay that behaves like a slower network link, for the pool
// benchmarks (bench/pool_latency.sh). The kernel here has no netem qdisc, so the link is
// emulated in user space, in front of the node's port, in the node's network namespace:
//
//   coordinator --(veth)--> emulator :LISTEN --(loopback)--> node :CONNECT
//
// Each direction of each connection is a pipe: a reader takes whatever the socket has (at most
// 64 KiB), stamps it with the time it may leave, and a writer sends it then. A chunk leaves at
//   max(previous chunk's departure, its serialization end + one-way delay + jitter)
// where the serialization end paces the chunks at the link's rate (one queue per direction, as
// a switch port's), the one-way delay is half the round trip, jitter is uniform in
// [-jitter, +jitter] (clamped so a chunk never leaves before it arrived plus its rate's time),
// and order is kept (TCP would reorder nothing either). Loss is not emulated packet by packet —
// the relay speaks TCP on both sides — but as what it costs TCP: a chunk of k packets (1448
// bytes of payload each) is hit with probability 1 - (1 - loss)^k and then waits the time
// Linux's tail-loss probe takes to resend it, max(2 x round trip, 10 ms). So the "Wi-Fi" profile's
// loss shows as the latency spikes it causes, which is what a pipeline's token loop feels.
//
// Every host of a home LAN has a link of its own (a cable to the switch, a radio to the access
// point), so a packet from one host to another crosses two: the sender's and the receiver's. A
// relay in front of the receiver's port sees only its own, so the sender's is given per address:
// --two-links-from (hosts behind a link like this one: the other nodes) and --sender-link
// (ADDR=RTT_MS,JITTER_MS,RATE_MBIT,LOSS: a host behind another kind of link, say a coordinator on
// Wi-Fi while the nodes are wired). Each chunk's delay is then the sum of one draw per link
// (delay, jitter, loss), paced once at the slower rate. Connections from any other address (a
// wired coordinator) cross this link alone.
//
// The figures it produces are measured, not assumed: the benchmark reports the round trip the
// coordinator measured through it.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

struct LinkParams {
  double rttS = 0;       // round trip added by the link (half each way)
  double jitterS = 0;    // each chunk's one-way delay varies uniformly by +- this
  double bytesPerS = 0;  // 0: unlimited
  double loss = 0;       // packet loss probability
};

// The links a connection's bytes cross in series: the sender's (if emulated) and this one.
using Path = std::vector<LinkParams>;

constexpr size_t kChunk = 64 * 1024;
constexpr double kPacketPayload = 1448;  // TCP payload of a 1500-byte Ethernet frame

struct Chunk {
  Clock::time_point departure;
  std::vector<char> bytes;  // empty: end of stream
};

// One direction of one connection.
class Pipe {
 public:
  Pipe(int from, int to, const Path& path, uint64_t seed)
      : m_from(from), m_to(to), m_path(path), m_rng(seed) {
    for (const LinkParams& l : m_path) {
      if (l.bytesPerS > 0)
        m_bytesPerS = m_bytesPerS > 0 ? std::min(m_bytesPerS, l.bytesPerS) : l.bytesPerS;
    }
  }

  void run() {
    std::thread writer([this] { write(); });
    read();
    writer.join();
  }

 private:
  void read() {
    Clock::time_point lastDeparture{}, lastTxEnd{};
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (;;) {
      Chunk c;
      c.bytes.resize(kChunk);
      const ssize_t n = ::recv(m_from, c.bytes.data(), c.bytes.size(), 0);
      const Clock::time_point now = Clock::now();
      if (n <= 0) {
        c.bytes.clear();
        c.departure = std::max(now, lastDeparture);
        push(std::move(c));
        return;
      }
      c.bytes.resize(static_cast<size_t>(n));
      const double tx = m_bytesPerS > 0 ? double(n) / m_bytesPerS : 0.0;
      lastTxEnd =
          std::max(now, lastTxEnd) + std::chrono::duration_cast<Clock::duration>(Seconds(tx));
      double delay = 0, rtt = 0;
      for (const LinkParams& l : m_path) rtt += l.rttS;
      for (const LinkParams& l : m_path) {
        delay += std::max(0.0, l.rttS / 2 + l.jitterS * (2 * unit(m_rng) - 1));
        if (l.loss > 0) {
          const double packets = std::ceil(double(n) / kPacketPayload);
          if (unit(m_rng) < 1 - std::pow(1 - l.loss, packets)) {
            delay += std::max(2 * rtt, 0.010);  // tail-loss probe resends it
          }
        }
      }
      c.departure = std::max(
          lastDeparture, lastTxEnd + std::chrono::duration_cast<Clock::duration>(Seconds(delay)));
      lastDeparture = c.departure;
      push(std::move(c));
    }
  }

  void push(Chunk c) {
    {
      std::lock_guard lock(m_mutex);
      m_queue.push_back(std::move(c));
    }
    m_ready.notify_one();
  }

  void write() {
    for (;;) {
      Chunk c;
      {
        std::unique_lock lock(m_mutex);
        m_ready.wait(lock, [this] { return !m_queue.empty(); });
        c = std::move(m_queue.front());
        m_queue.pop_front();
      }
      std::this_thread::sleep_until(c.departure);
      if (c.bytes.empty()) {
        ::shutdown(m_to, SHUT_WR);
        return;
      }
      size_t sent = 0;
      while (sent < c.bytes.size()) {
        const ssize_t n = ::send(m_to, c.bytes.data() + sent, c.bytes.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) {
          // The other side is gone: stop reading this direction too.
          ::shutdown(m_from, SHUT_RD);
          return;
        }
        sent += static_cast<size_t>(n);
      }
    }
  }

  int m_from, m_to;
  Path m_path;
  double m_bytesPerS = 0;  // the slowest rate of the path (0: unlimited)
  std::mt19937_64 m_rng;
  std::mutex m_mutex;
  std::condition_variable m_ready;
  std::deque<Chunk> m_queue;
};

bool parseAddress(const std::string& text, sockaddr_in& out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  std::memset(&out, 0, sizeof out);
  out.sin_family = AF_INET;
  try {
    const int port = std::stoi(text.substr(colon + 1));
    if (port <= 0 || port > 65535) return false;
    out.sin_port = htons(static_cast<uint16_t>(port));
  } catch (const std::exception&) {
    return false;
  }
  return ::inet_pton(AF_INET, text.substr(0, colon).c_str(), &out.sin_addr) == 1;
}

void noDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void relay(int client, sockaddr_in upstream, Path path, uint64_t seed) {
  const int server = ::socket(AF_INET, SOCK_STREAM, 0);
  if (server < 0 ||
      ::connect(server, reinterpret_cast<sockaddr*>(&upstream), sizeof upstream) != 0) {
    std::perror("link_emulator: connect");
    if (server >= 0) ::close(server);
    ::close(client);
    return;
  }
  noDelay(client);
  noDelay(server);
  Pipe up(client, server, path, seed), down(server, client, path, seed + 1);
  std::thread t([&down] { down.run(); });
  up.run();
  t.join();
  ::close(server);
  ::close(client);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a TCP relay that emulates a slower network link (delay, jitter, rate, loss)"};
  std::string listenAt, connectTo;
  double rttMs = 0, jitterMs = 0, rateMbit = 0, loss = 0;
  uint64_t seed = 1;
  app.add_option("--listen", listenAt, "IPv4:port to accept on")->required();
  app.add_option("--connect", connectTo, "IPv4:port each connection is relayed to")->required();
  app.add_option("--rtt-ms", rttMs, "round trip the link adds")->check(CLI::Range(0.0, 10000.0));
  app.add_option("--jitter-ms", jitterMs, "one-way delay varies uniformly by +- this")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--rate-mbit", rateMbit, "link rate per direction; 0 = unlimited")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--loss", loss, "packet loss probability (as TCP's resend stalls)")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--seed", seed, "random seed (jitter, loss)");
  std::vector<std::string> twoLinksFrom, senderLinks;
  app.add_option("--two-links-from", twoLinksFrom,
                 "IPv4 addresses of hosts behind a link like this one: their connections cross "
                 "both")
      ->delimiter(',');
  app.add_option("--sender-link", senderLinks,
                 "ADDR=RTT_MS,JITTER_MS,RATE_MBIT,LOSS: connections from ADDR also cross that "
                 "link (repeatable)");
  CLI11_PARSE(app, argc, argv);
  const LinkParams link{rttMs / 1e3, jitterMs / 1e3, rateMbit * 1e6 / 8, loss};
  // The sender's link of each address that has one.
  std::vector<std::pair<in_addr_t, LinkParams>> senders;
  for (const std::string& a : twoLinksFrom) {
    in_addr addr{};
    if (::inet_pton(AF_INET, a.c_str(), &addr) != 1) {
      std::fprintf(stderr, "link_emulator: --two-links-from takes IPv4 addresses, not '%s'\n",
                   a.c_str());
      return 2;
    }
    senders.emplace_back(addr.s_addr, link);
  }
  for (const std::string& spec : senderLinks) {
    in_addr addr{};
    double f[4] = {};
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || ::inet_pton(AF_INET, spec.substr(0, eq).c_str(), &addr) != 1 ||
        std::sscanf(spec.c_str() + eq + 1, "%lf,%lf,%lf,%lf", &f[0], &f[1], &f[2], &f[3]) != 4 ||
        std::any_of(std::begin(f), std::end(f), [](double v) { return !(v >= 0); }) || f[3] > 0.5) {
      std::fprintf(stderr,
                   "link_emulator: --sender-link takes ADDR=RTT_MS,JITTER_MS,RATE_MBIT,LOSS, not "
                   "'%s'\n",
                   spec.c_str());
      return 2;
    }
    senders.emplace_back(addr.s_addr, LinkParams{f[0] / 1e3, f[1] / 1e3, f[2] * 1e6 / 8, f[3]});
  }

  sockaddr_in listenAddr{}, upstream{};
  if (!parseAddress(listenAt, listenAddr) || !parseAddress(connectTo, upstream)) {
    std::fprintf(stderr, "link_emulator: addresses are IPv4:port\n");
    return 2;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&listenAddr), sizeof listenAddr) != 0 ||
      ::listen(fd, 64) != 0) {
    std::perror("link_emulator: listen");
    return 1;
  }
  std::fprintf(stderr,
               "link_emulator: %s -> %s, rtt %.3f ms +- %.3f, %.0f Mbit/s, loss %.4f, %zu sender "
               "link(s)\n",
               listenAt.c_str(), connectTo.c_str(), rttMs, jitterMs, rateMbit, loss,
               senders.size());
  for (uint64_t n = 0;; ++n) {
    sockaddr_in from{};
    socklen_t fromLength = sizeof from;
    const int client = ::accept(fd, reinterpret_cast<sockaddr*>(&from), &fromLength);
    if (client < 0) continue;
    Path path;
    for (const auto& [address, sender] : senders) {
      if (address == from.sin_addr.s_addr) path.push_back(sender);
    }
    path.push_back(link);
    std::thread(relay, client, upstream, std::move(path), seed + 2 * n).detach();
  }
}
