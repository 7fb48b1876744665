// discovery_probe: runs one lan/discovery Discovery and prints what it sees as JSON lines on
// stdout, for tests/integration/netns/test_discovery_netns.cpp (and for trying discovery by
// hand on a real LAN). Runs until SIGINT/SIGTERM.
//
//   discovery_probe --id ID --name NAME [--tcp-port 7000] [--udp-port 47474]
//                   [--interval-ms 1000] [--expiry-ms 5000] [--interface eth0]... [--no-broadcast]
//                   [--target ip:port]...
//
// Lines: {"event":"started","nonce":..,"udp_port":..}
//        {"event":"peers","peers":[{"id","name","port","summary","nonce",
//                                   "addresses":[{"address","interface"}]}]}   (on every change)
//        {"event":"identity_clash","their_nonce":..,"their_name":..,"address":..}

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "lan/discovery/discovery.h"

namespace {

volatile std::sig_atomic_t gStop = 0;
std::mutex gOutput;

void emit(const nlohmann::json& line) {
  std::lock_guard lock(gOutput);
  std::cout << line.dump() << std::endl;  // endl: the test reads line by line as we go
}

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "discovery_probe: " << why
            << "\nusage: discovery_probe --id ID --name NAME [--tcp-port N] [--udp-port N] "
               "[--interval-ms N] [--expiry-ms N] [--interface IF]... [--no-broadcast] "
               "[--target ip:port]...\n";
  std::exit(2);
}

int toInt(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const int v = std::stoi(value, &used);
    if (used == value.size()) return v;
  } catch (const std::exception&) {
  }
  usage(flag + ": '" + value + "' is not a number");
}

}  // namespace

int main(int argc, char** argv) {
  shoal::lan::DiscoveryOptions options;
  options.tcpPort = 7000;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-broadcast") {
      options.broadcast = false;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--id") {
      options.deviceId = value;
    } else if (flag == "--name") {
      options.name = value;
    } else if (flag == "--tcp-port") {
      options.tcpPort = static_cast<uint16_t>(toInt(flag, value));
    } else if (flag == "--udp-port") {
      options.udpPort = static_cast<uint16_t>(toInt(flag, value));
    } else if (flag == "--interval-ms") {
      options.interval = std::chrono::milliseconds(toInt(flag, value));
    } else if (flag == "--expiry-ms") {
      options.expiry = std::chrono::milliseconds(toInt(flag, value));
    } else if (flag == "--interface") {
      options.bindInterfaces.push_back(value);
    } else if (flag == "--target") {
      options.unicastTargets.push_back(value);
    } else {
      usage("unknown option " + flag);
    }
  }
  options.summary = "probe";
  options.onPeersChanged = [](const std::vector<shoal::lan::Peer>& peers) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& p : peers) {
      nlohmann::json addresses = nlohmann::json::array();
      for (const auto& a : p.addresses) {
        addresses.push_back({{"address", a.address}, {"interface", a.interfaceName}});
      }
      list.push_back({{"id", p.deviceId},
                      {"name", p.name},
                      {"port", p.tcpPort},
                      {"summary", p.summary},
                      {"nonce", p.nonce},
                      {"addresses", addresses}});
    }
    emit({{"event", "peers"}, {"peers", list}});
  };
  options.onIdentityClash = [](const shoal::lan::IdentityClash& c) {
    emit({{"event", "identity_clash"},
          {"their_nonce", c.theirNonce},
          {"their_name", c.theirName},
          {"address", c.address}});
  };
  try {
    std::signal(SIGINT, [](int) { gStop = 1; });
    std::signal(SIGTERM, [](int) { gStop = 1; });
    shoal::lan::Discovery discovery(options);
    discovery.start();
    emit({{"event", "started"}, {"nonce", discovery.nonce()}, {"udp_port", discovery.udpPort()}});
    // Discovery works on its own thread; this one only waits for the signal.
    while (gStop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    discovery.stop();
  } catch (const std::exception& e) {
    std::cerr << "discovery_probe: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
