#include "lan/transport/private_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "engine/error.h"

namespace shoal::lan {

namespace {

std::string reason() { return std::strerror(errno); }

// How often a bounded lock wait retries: short next to the human-scale waits it bounds (a CLI
// command), long enough not to spin.
constexpr std::chrono::milliseconds kLockPollInterval{20};

// Run as root on another user's state (`sudo shoal-cli pool forget --config-dir /var/lib/shoal`),
// a new file or directory must still belong to that user, or the service running as it could no
// longer read its own trust list or key. So root gives what it creates the owner of the
// directory it is created in; anyone else creates as themselves.
void adoptParentOwner(int fd, const std::filesystem::path& path) {
  if (::geteuid() != 0) return;
  const std::filesystem::path parent = path.parent_path().empty() ? "." : path.parent_path();
  struct stat st {};
  if (::stat(parent.c_str(), &st) != 0 || st.st_uid == 0) return;
  [[maybe_unused]] const int rc = ::fchown(fd, st.st_uid, st.st_gid);
}

}  // namespace

void createPrivateDirectories(const std::filesystem::path& dir) {
  if (dir.empty()) return;
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw Error(dir.string() + " exists and is not a directory");
    return;
  }
  const std::filesystem::path parent = dir.parent_path();
  if (!parent.empty() && parent != dir) createPrivateDirectories(parent);
  // mkdir applies the umask; chmod afterwards gives exactly kPrivateDirMode either way.
  if (::mkdir(dir.c_str(), kPrivateDirMode) != 0) {
    if (errno == EEXIST) return;  // another process made it meanwhile
    throw Error("cannot create directory " + dir.string() + ": " + reason());
  }
  ::chmod(dir.c_str(), kPrivateDirMode);
  if (const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    adoptParentOwner(fd, dir);
    ::close(fd);
  }
}

void writeNewFileSynced(const std::filesystem::path& path, std::string_view text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) throw Error("cannot create " + path.string() + ": " + reason());
  // The umask may have dropped bits of `mode`, never added any; set it exactly.
  ::fchmod(fd, mode);
  adoptParentOwner(fd, path);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = reason();
      ::close(fd);
      throw Error("cannot write " + path.string() + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string why = reason();
    ::close(fd);
    throw Error("cannot write " + path.string() + " to disk (fsync): " + why);
  }
  if (::close(fd) != 0) throw Error("cannot write " + path.string() + ": " + reason());
}

void replaceFileDurably(const std::filesystem::path& path, std::string_view text, mode_t mode) {
  const std::filesystem::path tmp = uniqueSibling(path, "tmp");
  try {
    writeNewFileSynced(tmp, text, mode);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = reason();
    ::unlink(tmp.c_str());
    throw Error("cannot rename " + tmp.string() + " to " + path.string() + ": " + why);
  }
  syncDirectory(path.parent_path().empty() ? "." : path.parent_path());
}

void syncDirectory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open directory " + dir.string() + ": " + reason());
  int rc = ::fsync(fd);
  // Some file systems (FUSE, some network ones) cannot fsync a directory; there the rename is as
  // durable as they make it, and refusing to save would be worse.
  if (rc != 0 && (errno == EINVAL || errno == ENOTSUP || errno == EROFS)) rc = 0;
  const std::string why = rc != 0 ? reason() : std::string();
  ::close(fd);
  if (rc != 0) throw Error("cannot write directory " + dir.string() + " to disk (fsync): " + why);
}

void tightenMode(const std::filesystem::path& path, mode_t mode) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) return;
  if (st.st_uid != ::geteuid()) return;
  const mode_t now = st.st_mode & 07777;
  if ((now & ~mode) != 0) ::chmod(path.c_str(), now & mode);
}

ExclusiveLock::ExclusiveLock(const std::filesystem::path& path) { acquire(path, std::nullopt); }

ExclusiveLock::ExclusiveLock(const std::filesystem::path& path, std::chrono::milliseconds maxWait) {
  acquire(path, maxWait);
}

void ExclusiveLock::acquire(const std::filesystem::path& path,
                            std::optional<std::chrono::milliseconds> maxWait) {
  std::error_code ec;
  const bool directory = std::filesystem::is_directory(path, ec);
  m_fd = directory ? ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                   : ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, kPrivateFileMode);
  if (m_fd < 0) throw Error("cannot open " + path.string() + " to lock it: " + reason());
  if (!directory) adoptParentOwner(m_fd, path);
  const auto deadline =
      std::chrono::steady_clock::now() + maxWait.value_or(std::chrono::milliseconds{0});
  while (::flock(m_fd, maxWait ? LOCK_EX | LOCK_NB : LOCK_EX) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    const bool held = maxWait && err == EWOULDBLOCK;
    if (held && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(kLockPollInterval);
      continue;
    }
    const std::string why =
        held ? "another process (shoal-cli, the app or a node on this config directory?) has "
               "held it for more than " +
                   std::to_string(maxWait->count()) + " ms; try again, or end that process"
             : std::strerror(err);
    ::close(m_fd);
    m_fd = -1;
    throw Error("cannot lock " + path.string() + ": " + why);
  }
}

ExclusiveLock::~ExclusiveLock() { ::close(m_fd); }  // closing releases the lock

std::filesystem::path uniqueSibling(const std::filesystem::path& path, const std::string& tag) {
  static std::atomic<unsigned> counter{0};
  return path.string() + "." + tag + "." + std::to_string(static_cast<long>(::getpid())) + "." +
         std::to_string(counter.fetch_add(1));
}

}  // namespace shoal::lan
