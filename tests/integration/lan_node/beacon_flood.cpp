// beacon_flood: sends forged discovery beacons (lan/discovery/beacon.h) to one UDP destination,
// for the beacon-attack tests (test_node_beacon_attacks, test_node_netns). Only ever aimed at
// loopback or at a network namespace a test made; every run is bounded by --count.
//
//   beacon_flood --to IP:PORT --count N [--from IP]... [--id ID | --distinct-ids]
//                [--tcp-port P] [--name NAME] [--pause-every K]
//
// --from (repeatable): source addresses to bind, used in turn (127.0.0.2, 127.0.0.3, ... on
// loopback; an address the namespace owns). --id: every beacon carries this device ID (a node's
// own: an identity-clash claim), each with a fresh nonce; --distinct-ids: each beacon a new ID
// ("FORGED-<n>"). --pause-every K: yield 1 ms after every K datagrams (so a receiver's socket
// buffer is not simply overrun). Prints "sent N" and exits 0; 2 on bad arguments or send errors.

#include <asio.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lan/discovery/beacon.h"

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "beacon_flood: %s\nusage: beacon_flood --to IP:PORT --count N [--from IP]... "
               "[--id ID | --distinct-ids] [--tcp-port P] [--name NAME] [--pause-every K]\n",
               why.c_str());
  std::exit(2);
}

// The most datagrams one run may send: the tests need 20,000; this bounds a mistake.
constexpr long kMaxCount = 100000;

}  // namespace

int main(int argc, char** argv) {
  std::string to, id, name = "forged";
  std::vector<std::string> sources;
  long count = 0, pauseEvery = 0;
  int tcpPort = 7000;
  bool distinct = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(flag + " needs a value");
      return argv[++i];
    };
    try {
      if (flag == "--to")
        to = value();
      else if (flag == "--from")
        sources.push_back(value());
      else if (flag == "--id")
        id = value();
      else if (flag == "--distinct-ids")
        distinct = true;
      else if (flag == "--count")
        count = std::stol(value());
      else if (flag == "--tcp-port")
        tcpPort = std::stoi(value());
      else if (flag == "--name")
        name = value();
      else if (flag == "--pause-every")
        pauseEvery = std::stol(value());
      else
        usage("unknown argument " + flag);
    } catch (const std::logic_error&) {
      usage(flag + ": not a number");
    }
  }
  if (to.empty() || count <= 0 || count > kMaxCount || (id.empty() && !distinct)) {
    usage("need --to, --count 1.." + std::to_string(kMaxCount) + " and --id or --distinct-ids");
  }
  const size_t colon = to.rfind(':');
  if (colon == std::string::npos) usage("--to " + to + ": expected IP:PORT");
  asio::io_context io;
  asio::error_code ec;
  const asio::ip::udp::endpoint destination(asio::ip::make_address(to.substr(0, colon), ec),
                                            static_cast<uint16_t>(std::stoi(to.substr(colon + 1))));
  if (ec) usage("--to " + to + ": " + ec.message());
  if (sources.empty()) sources.push_back(destination.address().is_v4() ? "0.0.0.0" : "::");
  std::vector<std::unique_ptr<asio::ip::udp::socket>> sockets;
  for (const std::string& s : sources) {
    const auto address = asio::ip::make_address(s, ec);
    if (ec) usage("--from " + s + ": " + ec.message());
    auto socket = std::make_unique<asio::ip::udp::socket>(
        io, address.is_v4() ? asio::ip::udp::v4() : asio::ip::udp::v6());
    socket->bind(asio::ip::udp::endpoint(address, 0), ec);
    if (ec) usage("cannot bind " + s + ": " + ec.message());
    sockets.push_back(std::move(socket));
  }
  long sent = 0;
  for (long n = 0; n < count; ++n) {
    shoal::lan::Beacon b;
    b.deviceId = distinct ? "FORGED-" + std::to_string(n) : id;
    b.name = name;
    b.tcpPort = static_cast<uint16_t>(tcpPort);
    b.nonce = shoal::lan::makeBeaconNonce();
    const std::vector<uint8_t> datagram = shoal::lan::encodeBeacon(b);
    sockets[static_cast<size_t>(n) % sockets.size()]->send_to(asio::buffer(datagram), destination,
                                                              0, ec);
    if (!ec) ++sent;
    if (pauseEvery > 0 && (n + 1) % pauseEvery == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::printf("sent %ld\n", sent);
  return sent == count ? 0 : 2;
}
