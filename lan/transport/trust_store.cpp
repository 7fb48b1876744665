#include "lan/transport/trust_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "lan/transport/identity.h"
#include "lan/transport/private_files.h"

namespace shoal::lan {

namespace {

// A trust file is ~130 bytes per device; 1 MiB is thousands of devices, far beyond a home LAN.
// A bigger file is not one we wrote: refuse it rather than read it into memory.
constexpr off_t kMaxTrustFileBytes = off_t{1} << 20;

// What to tell the user when the file cannot be used.
constexpr const char* kWhatToDo =
    "fix it, restore it from a backup, or delete it to trust nobody and pair again";

std::vector<TrustedDevice> parseDevices(const std::string& text, const std::string& where) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw Error("trust store: " + where + " is empty; " + kWhatToDo);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw Error("trust store: " + where + " is not valid JSON; " + kWhatToDo);
  if (!j.is_object() || !j.contains("devices") || !j["devices"].is_array())
    throw Error("trust store: " + where + " is not {\"devices\":[...]}; " + kWhatToDo);
  std::vector<TrustedDevice> devices;
  size_t index = 0;
  for (const auto& e : j["devices"]) {
    const std::string entry = where + ": devices[" + std::to_string(index) + "]";
    if (!e.is_object() || !e.contains("id") || !e["id"].is_string())
      throw Error("trust store: " + entry + " has no string \"id\"; " + kWhatToDo);
    TrustedDevice d;
    try {
      d.deviceId = normalizeDeviceId(e["id"].get<std::string>());
    } catch (const Error& err) {
      throw Error("trust store: " + entry + ": " + err.what() + "; " + kWhatToDo);
    }
    if (e.contains("name") && e["name"].is_string()) d.name = e["name"].get<std::string>();
    devices.push_back(std::move(d));
    ++index;
  }
  return devices;
}

std::string serialize(const std::vector<TrustedDevice>& devices) {
  nlohmann::json j = {{"devices", nlohmann::json::array()}};
  for (const TrustedDevice& d : devices)
    j["devices"].push_back({{"id", d.deviceId}, {"name", d.name}});
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
}

}  // namespace

TrustStore::FileStamp TrustStore::stampOf(const std::filesystem::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return {};
  return {true, st.st_dev, st.st_ino, st.st_size,
          int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
}

std::vector<TrustedDevice> TrustStore::readFile(const std::filesystem::path& file,
                                                FileStamp& stamp) {
  stamp = {};
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};
    throw Error("trust store: cannot read " + file.string() + ": " + std::strerror(errno));
  }
  // The stamp of exactly the version read (a rename meanwhile does not change what fd reads).
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error("trust store: cannot read " + file.string() + ": " + std::strerror(err));
  }
  stamp = {true, st.st_dev, st.st_ino, st.st_size,
           int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
  if (st.st_size > kMaxTrustFileBytes) {
    ::close(fd);
    throw Error("trust store: " + file.string() + " is " + std::to_string(st.st_size) +
                " bytes, more than the " + std::to_string(kMaxTrustFileBytes) +
                " a trust list can be; " + kWhatToDo);
  }
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw Error("trust store: cannot read " + file.string() + ": " + std::strerror(err));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (static_cast<off_t>(text.size()) > kMaxTrustFileBytes) break;  // grew while we read
  }
  ::close(fd);
  return parseDevices(text, file.string());
}

void TrustStore::load(const std::filesystem::path& configDir) {
  const std::filesystem::path file = configDir / "trusted.json";
  FileStamp stamp;
  std::vector<TrustedDevice> devices = readFile(file, stamp);
  // Written by an older version under a 022 umask (0644): who we trust is nobody else's business.
  if (stamp.exists) tightenMode(file, kPrivateFileMode);
  std::lock_guard lock(m_mutex);
  m_file = file;
  m_devices = std::move(devices);
  m_stamp = stamp;
}

std::filesystem::path TrustStore::file() const {
  std::lock_guard lock(m_mutex);
  return m_file;
}

bool TrustStore::refresh() const {
  std::lock_guard lock(m_mutex);
  return refreshLocked();
}

bool TrustStore::refreshLocked() const {
  if (m_file.empty() || stampOf(m_file) == m_stamp) return false;
  FileStamp stamp;
  try {
    std::vector<TrustedDevice> devices = readFile(m_file, stamp);
    const bool changed = devices != m_devices;
    m_devices = std::move(devices);
    m_stamp = stamp;
    return changed;
  } catch (const Error&) {
    // Fail closed until the file changes again (the stamp of the bad version is kept, so this
    // error is reported once).
    m_devices.clear();
    m_stamp = stamp;
    throw;
  }
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
  try {
    refreshLocked();
  } catch (const Error&) {
    return std::nullopt;  // a file that does not parse trusts nobody
  }
  for (const TrustedDevice& d : m_devices)
    if (d.deviceId == id) return d.name;
  return std::nullopt;
}

std::vector<TrustedDevice> TrustStore::list() const {
  std::lock_guard lock(m_mutex);
  try {
    refreshLocked();
  } catch (const Error&) {
    return {};
  }
  return m_devices;
}

void TrustStore::setLockWait(std::chrono::milliseconds maxWait) {
  std::lock_guard lock(m_mutex);
  m_lockWait = maxWait;
}

template <class Change>
bool TrustStore::modify(Change change) {
  std::filesystem::path file;
  std::chrono::milliseconds lockWait{};
  {
    std::lock_guard lock(m_mutex);
    if (m_file.empty()) return change(m_devices);
    file = m_file;
    lockWait = m_lockWait;
  }
  // The file lock, the read, the write and its fsyncs all happen without m_mutex: queries
  // (isTrusted on the listener's threads, the node's revocation check) never wait for another
  // process holding the lock, nor for the disk. Writers of this store are serialized by the
  // file lock itself (each takes its own).
  try {
    createPrivateDirectories(file.parent_path());
  } catch (const Error& e) {
    throw Error(std::string("trust store: ") + e.what());
  }
  std::optional<ExclusiveLock> fileLock;
  try {
    fileLock.emplace(file.string() + ".lock", lockWait);
  } catch (const Error& e) {
    throw Error(std::string("trust store: ") + e.what());
  }
  // What other processes saved since we last looked is the base of this change; a file that
  // does not parse throws here and stays as it is.
  FileStamp stamp;
  std::vector<TrustedDevice> devices = readFile(file, stamp);
  const bool changed = change(devices);
  if (changed) {
    try {
      replaceFileDurably(file, serialize(devices), kPrivateFileMode);
    } catch (const Error& e) {
      throw Error(std::string("trust store: ") + e.what());
    }
    stamp = stampOf(file);  // still under the file lock: our version
  }
  // Published while the file lock is still held, so no newer version can be overwritten by it.
  std::lock_guard lock(m_mutex);
  m_devices = std::move(devices);
  m_stamp = stamp;
  return changed;
}

void TrustStore::add(const std::string& deviceId, const std::string& name) {
  const std::string id = normalizeDeviceId(deviceId);
  modify([&](std::vector<TrustedDevice>& devices) {
    auto it = std::find_if(devices.begin(), devices.end(),
                           [&](const TrustedDevice& d) { return d.deviceId == id; });
    if (it == devices.end()) {
      devices.push_back({id, name});
      return true;
    }
    if (it->name == name) return false;
    it->name = name;
    return true;
  });
}

bool TrustStore::remove(const std::string& deviceId) {
  std::string id;
  try {
    id = normalizeDeviceId(deviceId);
  } catch (const Error&) {
    return false;
  }
  return modify([&](std::vector<TrustedDevice>& devices) {
    return std::erase_if(devices, [&](const TrustedDevice& d) { return d.deviceId == id; }) > 0;
  });
}

}  // namespace shoal::lan
