#pragma once
// The devices this node trusts: <configDir>/trusted.json, {"devices":[{"id":"...","name":"..."}]}.
// A connection is accepted only from (and made only to) a device in this list; pairing adds to
// it. Thread-safe: the listener reads it from its threads while pairing or the CLI changes it.

#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace shoal::lan {

struct TrustedDevice {
  std::string deviceId;  // canonical form (identity.h)
  std::string name;      // display name the peer gave when paired (or the user set)
};

class TrustStore {
 public:
  // An empty store kept in memory only (nothing is saved until load() names a directory).
  TrustStore() = default;
  TrustStore(const TrustStore&) = delete;
  TrustStore& operator=(const TrustStore&) = delete;

  // Reads <configDir>/trusted.json (a missing file is an empty store) and saves every later change
  // there. Throws shoal::Error naming the file and the entry when it is malformed.
  void load(const std::filesystem::path& configDir);

  // Whether `deviceId` (any spelling normalizeDeviceId accepts) is trusted; false for text that
  // is not a device ID at all.
  bool isTrusted(const std::string& deviceId) const;
  // The name stored for a trusted device.
  std::optional<std::string> nameOf(const std::string& deviceId) const;

  // Adds or renames a device and saves (temp file + rename, so a crash never leaves half a file).
  // Throws shoal::Error when the ID is malformed or the file cannot be written.
  void add(const std::string& deviceId, const std::string& name);
  // Removes a device (no-op when absent) and saves. Returns whether it was there.
  bool remove(const std::string& deviceId);

  std::vector<TrustedDevice> list() const;

 private:
  void saveLocked() const;

  mutable std::mutex m_mutex;
  std::filesystem::path m_file;  // empty: in memory only
  std::vector<TrustedDevice> m_devices;
};

}  // namespace shoal::lan
