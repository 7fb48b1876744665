#include "lan/node/shard_cache.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <span>
#include <vector>

#include "engine/error.h"
#include "lan/pool/sha256.h"

namespace shoal::lan {
namespace {

namespace fs = std::filesystem;

// Longest device ID used as a folder name as is (Shoal's are 63 characters).
constexpr size_t kMaxOwnerChars = 128;

bool plainOwner(const std::string& owner) {
  if (owner.empty() || owner.size() > kMaxOwnerChars) return false;
  return std::all_of(owner.begin(), owner.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f MiB", double(bytes) / double(uint64_t{1} << 20));
  return buf;
}

// The space of the file system holding `root` (its nearest folder that exists: the cache is
// created on its first shard); all zero when it cannot be read.
fs::space_info spaceAt(const fs::path& root) {
  std::error_code ec;
  fs::path at = root.empty() ? fs::current_path(ec) : fs::absolute(root, ec);
  while (!at.empty() && !fs::exists(at, ec) && at.has_relative_path()) at = at.parent_path();
  const fs::space_info space = fs::space(at, ec);
  if (ec || space.available == static_cast<uintmax_t>(-1)) return {0, 0, 0};
  return space;
}

}  // namespace

struct ShardCache::State {
  struct Entry {
    uint64_t bytes = 0;
    uint64_t lastUse = 0;  // m_clock value at the last use; larger is more recent
    int pins = 0;
  };

  fs::path root;
  uint64_t maxBytes = 0;
  mutable std::mutex mutex;              // guards the fields below
  std::map<std::string, Entry> entries;  // key: the shard's path
  uint64_t fileBytes = 0;                // sum of entries' bytes
  uint64_t reservedBytes = 0;            // streams in flight
  uint64_t clock = 0;

  // Mark `key` used now, on disk too (mtime) so that the order survives a restart.
  void touch(const std::string& key, Entry& e) {
    e.lastUse = ++clock;
    std::error_code ec;
    fs::last_write_time(key, fs::file_time_type::clock::now(), ec);
  }

  // Remove the shard file and the folders it leaves empty (model, owner), never root.
  void removeFile(const std::string& key) {
    std::error_code ec;
    fs::remove(key, ec);
    for (fs::path dir = fs::path(key).parent_path(); dir != root && dir.has_relative_path();
         dir = dir.parent_path()) {
      if (!fs::is_empty(dir, ec) || ec) break;
      fs::remove(dir, ec);
    }
  }

  // Evict unpinned shards, least recently used first, until `extra` more bytes fit under the
  // cap; false when they do not even with every unpinned shard gone. Caller holds `mutex`.
  bool makeRoom(uint64_t extra) {
    while (fileBytes + reservedBytes + extra > maxBytes) {
      auto victim = entries.end();
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (it->second.pins == 0 &&
            (victim == entries.end() || it->second.lastUse < victim->second.lastUse)) {
          victim = it;
        }
      }
      if (victim == entries.end()) return false;
      std::fprintf(stderr,
                   "shoal-node: shard cache: evicting %s (%s, least recently used) to stay "
                   "under its cap of %s\n",
                   victim->first.c_str(), mib(victim->second.bytes).c_str(), mib(maxBytes).c_str());
      removeFile(victim->first);
      fileBytes -= victim->second.bytes;
      entries.erase(victim);
    }
    return true;
  }

  uint64_t pinnedBytes() const {
    uint64_t n = 0;
    for (const auto& [key, e] : entries) n += e.pins > 0 ? e.bytes : 0;
    return n;
  }
};

ShardCache::Pin::Pin(std::shared_ptr<State> state, std::string key)
    : m_state(std::move(state)), m_key(std::move(key)) {}

ShardCache::Pin& ShardCache::Pin::operator=(Pin&& other) noexcept {
  if (this != &other) {
    release();
    m_state = std::move(other.m_state);
    m_key = std::move(other.m_key);
  }
  return *this;
}

ShardCache::Pin::~Pin() { release(); }

void ShardCache::Pin::release() {
  if (!m_state) return;
  std::lock_guard lock(m_state->mutex);
  if (const auto it = m_state->entries.find(m_key); it != m_state->entries.end()) {
    it->second.pins = std::max(0, it->second.pins - 1);
    // A shard streamed over the cap (Reservation::grow) leaves once no stage uses it.
    if (it->second.pins == 0) m_state->makeRoom(0);
  }
  m_state.reset();
}

ShardCache::Reservation::~Reservation() {
  if (m_committed) return;
  std::lock_guard lock(m_state->mutex);
  m_state->reservedBytes -= m_bytes;
}

void ShardCache::Reservation::grow(uint64_t bytes) {
  State& s = *m_state;
  std::lock_guard lock(s.mutex);
  if (m_committed) throw Error("shard cache: reservation already committed");
  const uint64_t pinned = s.pinnedBytes();
  if (pinned + s.reservedBytes + bytes > s.maxBytes) {
    // Over the cap even with every unused shard evicted. The shard is the file the stage will
    // run from, so it is written anyway while the disk has room for this tensor and then for
    // the whole shard (written beside the stream's temporary tensor files), counting the unused
    // shards evicted below; it leaves the cache when no stage uses it any more (Pin). Checked
    // before evicting anything: a stream that cannot fit must not empty the cache.
    const uint64_t room = diskRoomBytes(s.root) + (s.fileBytes - pinned);
    const uint64_t needed = bytes + m_bytes + bytes;
    if (needed > room) {
      throw Error("shard cache: " + std::to_string(m_bytes + bytes) +
                  " bytes of streamed weights are over its cap of " + std::to_string(s.maxBytes) +
                  " bytes (" + std::to_string(pinned) + " held by loaded stages, " +
                  std::to_string(s.reservedBytes) + " by streams in flight), and the disk at " +
                  s.root.string() + " has room for " + std::to_string(room) + " bytes, not the " +
                  std::to_string(needed) +
                  " this stream needs (a margin of the disk is kept free)");
    }
  }
  s.makeRoom(bytes);  // over the cap: evicts every unused shard, as commit() would
  s.reservedBytes += bytes;
  m_bytes += bytes;
}

ShardCache::Pin ShardCache::Reservation::commit(const fs::path& shard) {
  State& s = *m_state;
  std::error_code ec;
  const uint64_t size = fs::file_size(shard, ec);
  if (ec)
    throw Error(shard.string() + ": cannot read the size of the written shard: " + ec.message());
  const std::string key = shard.string();
  std::lock_guard lock(s.mutex);
  if (m_committed) throw Error("shard cache: reservation already committed");
  m_committed = true;
  s.reservedBytes -= m_bytes;
  State::Entry& e = s.entries[key];
  s.fileBytes = s.fileBytes - e.bytes + size;  // a re-streamed shard replaced the old file
  e.bytes = size;
  ++e.pins;
  s.touch(key, e);
  // The file may be larger than its tensors (metadata, alignment): make room for the difference.
  s.makeRoom(0);
  return Pin(m_state, key);
}

ShardCache::ShardCache(fs::path root, uint64_t maxBytes) : m_state(std::make_shared<State>()) {
  State& s = *m_state;
  s.root = std::move(root);
  struct Found {
    std::string key;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::vector<fs::path> leftovers;
  std::error_code ec;
  if (fs::is_directory(s.root, ec)) {
    for (auto it = fs::recursive_directory_iterator(s.root, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const fs::path& p = it->path();
      const std::string name = p.filename().string();
      if (name.starts_with(".incoming-") || name.find(".tmp-") != std::string::npos) {
        leftovers.push_back(p);
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file(ec) || p.extension() != ".gguf") continue;
      std::error_code sizeEc, timeEc;
      const uint64_t bytes = it->file_size(sizeEc);
      const auto mtime = it->last_write_time(timeEc);
      if (!sizeEc && !timeEc) found.push_back({p.string(), bytes, mtime});
    }
  }
  for (const auto& p : leftovers) fs::remove_all(p, ec);
  // Oldest first, so that the clock values order them by their last use.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  for (const auto& f : found) {
    s.entries[f.key] = State::Entry{f.bytes, ++s.clock, 0};
    s.fileBytes += f.bytes;
  }
  s.maxBytes = maxBytes > 0 ? maxBytes : defaultMaxBytes(s.root, s.fileBytes);
  std::lock_guard lock(s.mutex);
  s.makeRoom(0);
}

ShardCache::~ShardCache() = default;

uint64_t ShardCache::defaultMaxBytes(const fs::path& root, uint64_t cachedBytes) {
  const uint64_t available = spaceAt(root).available;
  return std::min(kShardCacheDefaultMaxBytes,
                  (available + cachedBytes) / kShardCacheDefaultShareDivisor);
}

uint64_t ShardCache::diskRoomBytes(const fs::path& root) {
  const fs::space_info space = spaceAt(root);
  const uint64_t margin = std::max(kShardCacheDiskMarginMinBytes,
                                   uint64_t(space.capacity) / kShardCacheDiskMarginDivisor);
  return space.available > margin ? uint64_t(space.available) - margin : 0;
}

fs::path ShardCache::pathFor(const std::string& owner, const std::string& sha256,
                             int32_t firstLayer, int32_t lastLayer) const {
  const std::string folder =
      plainOwner(owner)
          ? owner
          : "peer-" +
                sha256Hex(std::span(reinterpret_cast<const uint8_t*>(owner.data()), owner.size()))
                    .substr(0, 32);
  return m_state->root / folder / sha256 /
         (std::to_string(firstLayer) + "-" + std::to_string(lastLayer) + ".gguf");
}

std::optional<ShardCache::Pin> ShardCache::acquire(const fs::path& shard) {
  State& s = *m_state;
  const std::string key = shard.string();
  std::lock_guard lock(s.mutex);
  const auto it = s.entries.find(key);
  if (it == s.entries.end()) return std::nullopt;
  std::error_code ec;
  if (!fs::is_regular_file(shard, ec)) {
    // Removed behind our back: forget it.
    s.fileBytes -= it->second.bytes;
    if (it->second.pins == 0) {
      s.entries.erase(it);
    } else {
      it->second.bytes = 0;
    }
    return std::nullopt;
  }
  ++it->second.pins;
  s.touch(key, it->second);
  return Pin(m_state, key);
}

std::unique_ptr<ShardCache::Reservation> ShardCache::reserve() {
  return std::make_unique<Reservation>(m_state);
}

uint64_t ShardCache::maxBytes() const { return m_state->maxBytes; }

uint64_t ShardCache::usedBytes() const {
  std::lock_guard lock(m_state->mutex);
  return m_state->fileBytes + m_state->reservedBytes;
}

std::vector<ShardCache::Shard> ShardCache::shardsOf(const std::string& owner, size_t most) const {
  // pathFor's folder for this owner: <root>/<owner folder>/<sha256>/<first>-<last>.gguf.
  const fs::path folder = pathFor(owner, "x", 0, 1).parent_path().parent_path();
  std::vector<Shard> out;
  std::lock_guard lock(m_state->mutex);
  for (const auto& [key, entry] : m_state->entries) {
    if (out.size() >= most) break;
    const fs::path p(key);
    if (p.parent_path().parent_path() != folder || p.extension() != ".gguf") continue;
    Shard shard;
    shard.sha256 = p.parent_path().filename().string();
    int first = -1, last = -1;
    char tail = 0;
    const std::string stem = p.stem().string();
    if (std::sscanf(stem.c_str(), "%d-%d%c", &first, &last, &tail) != 2 || first < 0 ||
        last <= first) {
      continue;
    }
    shard.firstLayer = first;
    shard.lastLayer = last;
    out.push_back(std::move(shard));
  }
  return out;
}

bool ShardCache::contains(const fs::path& shard) const {
  std::lock_guard lock(m_state->mutex);
  return m_state->entries.count(shard.string()) > 0;
}

}  // namespace shoal::lan
