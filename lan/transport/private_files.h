#pragma once
// The files that hold a node's secret and its trust decisions (identity/, trusted.json): private
// to the user who runs it (when root creates them in another user's directory, e.g. `sudo
// shoal-cli ... --config-dir /var/lib/shoal`, they get that directory's owner, so the service
// can still read them), and written so that a crash or power cut leaves either the old or the
// new content on disk, never half of one (write a temporary file, fsync it, rename it over the
// old one, fsync the directory so the rename itself is on disk).

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace shoal::lan {

// Directories we create for secrets and trust: only their owner may list or enter them.
inline constexpr mode_t kPrivateDirMode = 0700;
// Files with secrets or trust decisions: only their owner may read or write them.
inline constexpr mode_t kPrivateFileMode = 0600;

// Creates `dir` and any missing parent with mode kPrivateDirMode (whatever the umask); parents
// that exist already keep their mode. Throws shoal::Error naming the directory.
void createPrivateDirectories(const std::filesystem::path& dir);

// Writes `text` to a new file `path` (created with `mode`, never readable by others for a
// moment) and fsyncs it. Throws shoal::Error (naming the file and the system's reason) when it
// exists already or cannot be written.
void writeNewFileSynced(const std::filesystem::path& path, std::string_view text, mode_t mode);

// Replaces `path` with `text` durably: a unique temporary file beside it (writeNewFileSynced),
// renamed over `path`, then the directory fsynced. Readers see the old or the new file, never a
// half one. Throws shoal::Error naming the file.
void replaceFileDurably(const std::filesystem::path& path, std::string_view text, mode_t mode);

// fsync of a directory, so that renames and new entries in it survive a crash. Throws
// shoal::Error naming it.
void syncDirectory(const std::filesystem::path& dir);

// Removes the permission bits outside `mode` from an existing file or directory (one written by
// an older version under a 022 umask). A no-op when it is already as tight, or when we do not
// own it (then the owner decided).
void tightenMode(const std::filesystem::path& path, mode_t mode);

// An exclusive flock(2) held for the object's lifetime, between processes and between threads
// (each lock opens its own file description). `path` is a directory (locked itself: no extra
// file) or a lock file, created with kPrivateFileMode when missing and never deleted (deleting it
// would let two processes lock two different files). Throws shoal::Error naming it.
class ExclusiveLock {
 public:
  explicit ExclusiveLock(const std::filesystem::path& path);
  // The same, but gives up when another holder keeps it for longer than `maxWait` (a suspended
  // or hung process must not stall us forever): throws shoal::Error naming it and the wait.
  ExclusiveLock(const std::filesystem::path& path, std::chrono::milliseconds maxWait);
  ~ExclusiveLock();
  ExclusiveLock(const ExclusiveLock&) = delete;
  ExclusiveLock& operator=(const ExclusiveLock&) = delete;

 private:
  // Opens `path` and locks it: blocking when `maxWait` is empty, polling until it passes if not.
  void acquire(const std::filesystem::path& path, std::optional<std::chrono::milliseconds> maxWait);

  int m_fd = -1;
};

// A name for a temporary sibling of `path` no other thread or process uses at the same time:
// "<path>.<tag>.<pid>.<counter>".
std::filesystem::path uniqueSibling(const std::filesystem::path& path, const std::string& tag);

}  // namespace shoal::lan
