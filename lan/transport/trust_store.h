#pragma once
// The devices this node trusts: <configDir>/trusted.json, {"devices":[{"id":"...","name":"..."}]}.
// A connection is accepted only from (and made only to) a device in this list; pairing adds to
// it, `shoal-cli pool forget` and the app's Forget button remove from it.
//
// Several processes share the file (a running shoal-node, shoal-cli on the same config dir, the
// app), so the file is the truth and this object a cache of it:
//  - every change (add, remove) takes an exclusive flock on trusted.json.lock beside the file,
//    re-reads the file, applies the one change and writes the result durably (temporary file,
//    fsync, rename, fsync of the directory; mode 0600) before unlocking: concurrent writers merge,
//    none loses another's change. It waits at most kDefaultLockWait for the lock, then fails
//    with an error naming it;
//  - queries never take the file lock nor wait for a change in progress (writers rename a
//    complete file into place, so reading without the lock sees the old or the new list);
//  - every query (isTrusted, nameOf, list) first re-reads the file when it changed on disk
//    (device, inode, size or mtime differ from the last read: a rename always gives a new inode),
//    so a device forgotten by another process stops being trusted at its next check;
//  - a file that is empty or does not parse is an error naming it, never an empty list: load()
//    throws, a change throws and leaves the file as it was, and a query after such a change on
//    disk trusts nobody until the file parses again (fail closed: a half-edited file must not
//    keep a revoked device trusted). A missing file is an empty list (first start, or everyone
//    un-paired by deleting it).
// Thread-safe: the listener reads it from its threads while pairing or the CLI changes it.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace shoal::lan {

struct TrustedDevice {
  std::string deviceId;  // canonical form (identity.h)
  std::string name;      // display name the peer gave when paired (or the user set)
  bool operator==(const TrustedDevice&) const = default;
};

class TrustStore {
 public:
  // An empty store kept in memory only (nothing is saved until load() names a directory).
  TrustStore() = default;
  TrustStore(const TrustStore&) = delete;
  TrustStore& operator=(const TrustStore&) = delete;

  // Reads <configDir>/trusted.json (a missing file is an empty store) and keeps following it
  // (see above). Throws shoal::Error, one line naming the file, the entry and what to do, when it
  // is empty or malformed; the file is left as it is.
  void load(const std::filesystem::path& configDir);

  // Whether `deviceId` (any spelling normalizeDeviceId accepts) is trusted; false for text that
  // is not a device ID at all, and for everyone while the file on disk does not parse.
  bool isTrusted(const std::string& deviceId) const;
  // The name stored for a trusted device.
  std::optional<std::string> nameOf(const std::string& deviceId) const;

  // Adds or renames a device and saves (locked, merged with the file, durable; see above).
  // Throws shoal::Error when the ID is malformed or the file cannot be read, parsed or written.
  void add(const std::string& deviceId, const std::string& name);
  // Removes a device (no-op when absent) and saves the same way. Returns whether it was there.
  // Throws shoal::Error when the file cannot be read, parsed or written.
  bool remove(const std::string& deviceId);

  std::vector<TrustedDevice> list() const;

  // Re-reads the file when it changed on disk since the last read. Returns whether that changed
  // the list (the node then re-checks its live sessions). Throws shoal::Error when the changed
  // file does not parse; the store trusts nobody until it does. Queries call it themselves and
  // swallow that error (they answer "not trusted").
  bool refresh() const;

  // The file followed (empty for an in-memory store).
  std::filesystem::path file() const;

  // How long add() and remove() wait for another holder of the file lock before they give up
  // with an error (kDefaultLockWait unless changed; tests shorten it).
  void setLockWait(std::chrono::milliseconds maxWait);
  // A CLI command or a pairing waiting longer than this is stuck behind a hung or suspended
  // process; saying so beats hanging. A real change holds the lock for milliseconds.
  static constexpr std::chrono::milliseconds kDefaultLockWait{10000};

 private:
  // What identifies one version of the file on disk. exists == false: there is no file.
  struct FileStamp {
    bool exists = false;
    dev_t device = 0;
    ino_t inode = 0;
    off_t size = 0;
    int64_t mtimeNs = 0;
    bool operator==(const FileStamp&) const = default;
  };
  static FileStamp stampOf(const std::filesystem::path& file);
  // Reads and parses `file` (a missing file is an empty list); `stamp` gets the version read.
  static std::vector<TrustedDevice> readFile(const std::filesystem::path& file, FileStamp& stamp);
  // refresh() with m_mutex held.
  bool refreshLocked() const;
  // Under the file lock: re-read, apply `change` to the list, save when it reports a change.
  template <class Change>
  bool modify(Change change);

  // Guards the members below; held only for memory work and reads of the file, never while
  // waiting for the file lock or writing (see modify).
  mutable std::mutex m_mutex;
  std::filesystem::path m_file;  // empty: in memory only
  std::chrono::milliseconds m_lockWait = kDefaultLockWait;
  // The cache of the file, and which version of it it holds.
  mutable std::vector<TrustedDevice> m_devices;
  mutable FileStamp m_stamp;
};

}  // namespace shoal::lan
