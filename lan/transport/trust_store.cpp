#include "lan/transport/trust_store.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/error.h"
#include "lan/transport/identity.h"

namespace shoal::lan {

void TrustStore::load(const std::filesystem::path& configDir) {
  const std::filesystem::path file = configDir / "trusted.json";
  std::vector<TrustedDevice> devices;
  if (std::filesystem::exists(file)) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error("trust store: cannot read " + file.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("devices") || !j["devices"].is_array())
      throw Error("trust store: " + file.string() + " is not {\"devices\":[...]}");
    size_t index = 0;
    for (const auto& e : j["devices"]) {
      if (!e.is_object() || !e.contains("id") || !e["id"].is_string())
        throw Error("trust store: " + file.string() + ": devices[" + std::to_string(index) +
                    "] has no string \"id\"");
      TrustedDevice d;
      try {
        d.deviceId = normalizeDeviceId(e["id"].get<std::string>());
      } catch (const Error& err) {
        throw Error("trust store: " + file.string() + ": devices[" + std::to_string(index) +
                    "]: " + err.what());
      }
      if (e.contains("name") && e["name"].is_string()) d.name = e["name"].get<std::string>();
      devices.push_back(std::move(d));
      ++index;
    }
  }
  std::lock_guard lock(m_mutex);
  m_file = file;
  m_devices = std::move(devices);
}

bool TrustStore::isTrusted(const std::string& deviceId) const {
  return nameOf(deviceId).has_value();
}

std::optional<std::string> TrustStore::nameOf(const std::string& deviceId) const {
  std::string id;
  try {
    id = normalizeDeviceId(deviceId);
  } catch (const Error&) {
    return std::nullopt;
  }
  std::lock_guard lock(m_mutex);
  for (const TrustedDevice& d : m_devices)
    if (d.deviceId == id) return d.name;
  return std::nullopt;
}

void TrustStore::add(const std::string& deviceId, const std::string& name) {
  const std::string id = normalizeDeviceId(deviceId);
  std::lock_guard lock(m_mutex);
  auto it = std::find_if(m_devices.begin(), m_devices.end(),
                         [&](const TrustedDevice& d) { return d.deviceId == id; });
  if (it != m_devices.end())
    it->name = name;
  else
    m_devices.push_back({id, name});
  saveLocked();
}

bool TrustStore::remove(const std::string& deviceId) {
  std::string id;
  try {
    id = normalizeDeviceId(deviceId);
  } catch (const Error&) {
    return false;
  }
  std::lock_guard lock(m_mutex);
  const auto before = m_devices.size();
  std::erase_if(m_devices, [&](const TrustedDevice& d) { return d.deviceId == id; });
  if (m_devices.size() == before) return false;
  saveLocked();
  return true;
}

std::vector<TrustedDevice> TrustStore::list() const {
  std::lock_guard lock(m_mutex);
  return m_devices;
}

void TrustStore::saveLocked() const {
  if (m_file.empty()) return;
  nlohmann::json j = {{"devices", nlohmann::json::array()}};
  for (const TrustedDevice& d : m_devices)
    j["devices"].push_back({{"id", d.deviceId}, {"name", d.name}});
  std::error_code ec;
  std::filesystem::create_directories(m_file.parent_path(), ec);
  // A unique temp name per process so two processes saving at once never share a half file.
  const std::filesystem::path tmp =
      m_file.string() + ".tmp." + std::to_string(static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("trust store: cannot write " + tmp.string());
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    out.flush();
    if (!out) throw Error("trust store: cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, m_file, ec);
  if (ec)
    throw Error("trust store: cannot rename " + tmp.string() + " to " + m_file.string() + ": " +
                ec.message());
}

}  // namespace shoal::lan
