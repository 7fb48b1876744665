#include "lan/hub/partial_download.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "lan/hub/curl_request.h"
#include "lan/hub/hub_errors.h"
#include "lan/hub/hub_parse.h"
#include "lan/pool/sha256.h"

namespace shoal::lan::hub {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Kind = HubError::Kind;

[[noreturn]] void localError(const std::string& what, const fs::path& path,
                             const std::error_code& ec = {}) {
  throw HubError(Kind::Local,
                 what + " " + path.string() + (ec ? ": " + ec.message() : std::string()));
}

json noteOf(const PartRequest& r) {
  return {{"repo", r.repo},
          {"revision", r.revision},
          {"path", r.file.path},
          {"size", r.file.size},
          {"sha256", r.file.sha256}};
}

// The note beside a part, or null when there is none or it is unreadable.
json readNote(const fs::path& note) {
  std::ifstream in(note);
  if (!in) return nullptr;
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json(nullptr);
}

// Whether a note is of the same file (repo, revision, path) as `expected`, whatever its size and
// hash: only then may its part be replaced.
bool sameFile(const json& note, const json& expected) {
  for (const char* key : {"repo", "revision", "path"}) {
    if (!note.contains(key) || note[key] != expected[key]) return false;
  }
  return true;
}

// An exclusive flock() on the part's lock file for as long as it lives.
class PartLock {
 public:
  explicit PartLock(const fs::path& path) {
    m_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (m_fd < 0) localError("cannot create", path);
    if (::flock(m_fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(m_fd);
      throw HubError(Kind::Local, "another program is downloading " +
                                      path.filename().replace_extension().string() +
                                      " into this folder right now");
    }
  }
  ~PartLock() { ::close(m_fd); }  // closing releases the lock
  PartLock(const PartLock&) = delete;
  PartLock& operator=(const PartLock&) = delete;

 private:
  int m_fd = -1;
};

// Moves `from` to `to` unless `to` exists (link + unlink: atomic, never replacing).
void moveNoReplace(const fs::path& from, const fs::path& to) {
  if (::link(from.c_str(), to.c_str()) != 0) {
    const std::error_code ec(errno, std::generic_category());
    if (errno == EEXIST) {
      throw HubError(Kind::Local, "a different file appeared in the models folder as " +
                                      to.string() + "; the download is kept in " + from.string());
    }
    localError("cannot move the finished download to", to, ec);
  }
  std::error_code ec;
  fs::remove(from, ec);
}

// Written to a temporary name and renamed: a crash leaves the old note or the new one.
void writeNote(const fs::path& note, const json& content) {
  const fs::path tmp = note.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content.dump() << "\n";
    if (!out.flush()) localError("cannot write", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, note, ec);
  if (ec) localError("cannot rename into", note, ec);
}

uint64_t sizeOr0(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(size);
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

enum class Transfer { Done, Restart };

// One GET of the part's bytes from `offset` (a Range request when > 0). Returns Restart when
// the server cannot continue at `offset` (416): the caller starts again from 0.
Transfer transfer(const HubOptions& options, const PartRequest& r, const PartPaths& paths,
                  uint64_t& offset) {
  CurlRequest request(options, r.url);
  if (offset > 0) request.setRange(offset);
  FilePtr out;
  uint64_t written = 0;
  std::string errorBody;
  std::string failure;  // why the sink stopped the transfer
  Kind failureKind = Kind::BadReply;
  const std::string expectedRange = "bytes " + std::to_string(offset) + "-";
  const std::string expectedTotal = "/" + std::to_string(r.file.size);
  request.onBody([&](const ResponseHead& head, std::span<const uint8_t> bytes) {
    if (head.status != 200 && head.status != 206) {
      if (errorBody.size() < 4096) errorBody.append(bytes.begin(), bytes.end());
      return true;
    }
    if (!out) {
      if (head.status == 206) {
        const std::string& cr = head.contentRange;
        if (cr.rfind(expectedRange, 0) != 0 || cr.size() < expectedTotal.size() ||
            cr.compare(cr.size() - expectedTotal.size(), expectedTotal.size(), expectedTotal)) {
          failure = "the server sent the range '" + cr + "' for a request from byte " +
                    std::to_string(offset) + " of " + std::to_string(r.file.size);
          return false;
        }
      } else {
        offset = 0;  // 200 to a Range request: the whole file comes, start again from 0
      }
      out.reset(std::fopen(paths.part.c_str(), offset > 0 ? "ab" : "wb"));
      if (!out) {
        failureKind = Kind::Local;
        failure = "cannot write " + paths.part.string();
        return false;
      }
    }
    if (offset + written + bytes.size() > r.file.size) {
      failure = "the server sent more than the " + std::to_string(r.file.size) +
                " bytes its file list gives for '" + r.file.path + "'";
      return false;
    }
    if (std::fwrite(bytes.data(), 1, bytes.size(), out.get()) != bytes.size()) {
      failureKind = Kind::Local;
      failure = "cannot write " + paths.part.string() + " (disk full?)";
      return false;
    }
    written += bytes.size();
    return true;
  });
  request.onProgress([&](uint64_t, uint64_t) {
    if (r.control && r.control->stop.load()) return false;
    // Only once the file's bytes flow: not for the head of a 401 or a redirect.
    if (r.progress && out) r.progress(offset + written, false);
    return true;
  });
  const CURLcode code = request.perform();
  if (out && std::fflush(out.get()) != 0) localError("cannot write", paths.part);
  out.reset();

  if (code == CURLE_ABORTED_BY_CALLBACK && r.control && r.control->stop.load()) {
    throw HubError(Kind::Cancelled, "download of '" + r.file.path + "' stopped; " +
                                        std::to_string(offset + written) + " of " +
                                        std::to_string(r.file.size) + " bytes kept to resume");
  }
  if (!failure.empty()) throw HubError(failureKind, failure);
  const long status = request.head().status;
  if (code != CURLE_OK && (status == 200 || status == 206 || status == 0)) {
    throwTransferError(code, request,
                       "download of '" + r.file.path + "' interrupted after " +
                           std::to_string(offset + written) + " of " + std::to_string(r.file.size) +
                           " bytes (kept: run again to resume)");
  }
  if (status == 416 && offset > 0) return Transfer::Restart;
  if (status != 200 && status != 206) {
    throwHttpError(request.head(), errorBody, {r.repo, r.revision, r.file.path}, options, r.url);
  }
  if (offset + written != r.file.size) {
    throw HubError(Kind::Network, "download of '" + r.file.path + "' ended after " +
                                      std::to_string(offset + written) + " of " +
                                      std::to_string(r.file.size) +
                                      " bytes (kept: run again to resume)");
  }
  return Transfer::Done;
}

// The part's SHA-256, read in blocks so a cancel is honoured while hashing a big file.
std::string hashPart(const PartRequest& r, const fs::path& part) {
  std::ifstream in(part, std::ios::binary);
  if (!in) localError("cannot read", part);
  Sha256 hash;
  std::vector<uint8_t> block(1 << 20);
  uint64_t done = 0;
  while (in) {
    in.read(reinterpret_cast<char*>(block.data()), static_cast<std::streamsize>(block.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    hash.update(std::span<const uint8_t>(block.data(), got));
    done += got;
    if (r.control && r.control->stop.load()) {
      throw HubError(Kind::Cancelled, "verification of '" + r.file.path + "' stopped");
    }
    if (r.progress) r.progress(done, true);
  }
  if (in.bad()) localError("cannot read", part);
  return hash.hexDigest();
}

}  // namespace

PartPaths partPaths(const fs::path& modelsDir, const RepoFile& file) {
  if (!isSafeRepoPath(file.path)) {
    throw HubError(Kind::BadReply, "refusing the file path '" + file.path.substr(0, 200) +
                                       "': it could write outside the models folder");
  }
  const std::string name = file.path.substr(file.path.rfind('/') + 1);  // npos + 1 == 0
  PartPaths p;
  p.partial = modelsDir / ".partial";
  p.part = p.partial / (name + ".part");
  p.note = p.partial / (name + ".part.json");
  p.lock = p.partial / (name + ".lock");
  p.rejected = p.partial / (name + ".rejected");
  p.finished = modelsDir / name;
  return p;
}

fs::path downloadPart(const HubOptions& options, const PartRequest& r) {
  const PartPaths paths = partPaths(r.modelsDir, r.file);
  std::error_code ec;
  fs::create_directories(paths.partial, ec);
  if (ec) localError("cannot create", paths.partial, ec);

  const PartLock lock(paths.lock);
  const json note = noteOf(r);
  if (fs::exists(paths.finished)) {
    // Done before (another run, the same model listed again), when it is the listed file.
    if (fs::is_regular_file(paths.finished) && sizeOr0(paths.finished) == r.file.size &&
        (r.file.sha256.empty() || hashPart(r, paths.finished) == r.file.sha256)) {
      return paths.finished;
    }
    // Never replace what the user already has under that name (another model, an edit).
    throw HubError(Kind::Local, "a different file is already in the models folder as " +
                                    paths.finished.string() + "; move or rename it first");
  }
  uint64_t offset = 0;
  if (fs::exists(paths.part)) {
    const json existing = readNote(paths.note);
    if (!existing.is_null() && !sameFile(existing, note)) {
      throw HubError(Kind::Local, "a paused download of another file named " +
                                      paths.finished.filename().string() + " (from " +
                                      existing.value("repo", std::string("?")) + ") is in " +
                                      paths.partial.string() + "; resume or cancel it first");
    }
    offset = sizeOr0(paths.part);
    // A new upload of the file (size or hash changed), no note, or more than the file: restart.
    if (existing != note || offset > r.file.size) {
      fs::remove(paths.part, ec);
      offset = 0;
    }
  }
  writeNote(paths.note, note);
  if (r.file.size == 0 || offset < r.file.size) {
    if (offset == 0) {
      // Create the part now: an empty file downloads no byte, and a later run finds the note's
      // part even when the first transfer failed before its first byte.
      FilePtr created(std::fopen(paths.part.c_str(), "wb"));
      if (!created) localError("cannot create", paths.part);
    }
    if (offset < r.file.size && transfer(options, r, paths, offset) == Transfer::Restart) {
      fs::remove(paths.part, ec);
      offset = 0;
      FilePtr created(std::fopen(paths.part.c_str(), "wb"));
      if (!created) localError("cannot create", paths.part);
      transfer(options, r, paths, offset);
    }
  }

  if (!r.file.sha256.empty()) {
    const std::string actual = hashPart(r, paths.part);
    if (actual != r.file.sha256) {
      fs::rename(paths.part, paths.rejected, ec);
      fs::remove(paths.note, ec);
      throw HubError(Kind::Integrity, "'" + r.file.path + "' is corrupt: its SHA-256 is " + actual +
                                          ", the Hub publishes " + r.file.sha256 +
                                          "; kept apart as " + paths.rejected.string() +
                                          ", not installed");
    }
  }
  moveNoReplace(paths.part, paths.finished);
  fs::remove(paths.note, ec);
  fs::remove(paths.lock, ec);     // still held: no other download of this file can be waiting
  fs::remove(paths.partial, ec);  // only when empty (other downloads keep it)
  return paths.finished;
}

}  // namespace shoal::lan::hub
