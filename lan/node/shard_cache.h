#pragma once
// The node's cache of streamed weight shards (shard_receiver.h writes them), bounded in total
// size with least-recently-used eviction.
//
// Layout: <root>/<owner>/<model sha256>/<first>-<last>.gguf, root = <configDir>/shards. `owner`
// is the device ID of the coordinator that streamed the shard. That coordinator is the only party
// that vouched for the bytes: the node checks each tensor against the SHA-256 the same
// coordinator sent, and nothing ties those hashes to the model hash it claimed. So a shard is
// served only to the coordinator that streamed it; one trusted peer cannot plant weights that
// another peer would then run (a cache hit for the other peer would be a poisoned model).
//
// Size: every *.gguf under root counts (also shards of older layouts, so they age out), plus the
// reservations of streams in flight (their temporary files are not counted: a stream briefly
// needs up to twice its size while the shard is written). Making room evicts the least recently
// used shards that no stage holds (a Pin). A stream that cannot fit under the cap beside the
// shards in use is still written while the disk has room for it (diskRoomBytes: the streamed
// shard is the file its stage runs from, so refusing it would refuse the stage); the cache is
// then over its cap until that shard's last Pin goes, which evicts down to the cap again. Only a
// stream the disk cannot hold is refused. Last use is also written as the file's modification
// time, so the order survives a restart.
//
// Thread-safe: NodeHost serves each connection on its own thread. Pins and reservations may
// outlive the ShardCache object (they share its state).

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shoal::lan {

// Share of the disk's free space the cache may fill by default (1/4): the node's disk is usually
// someone's own machine and the cache is only a speed-up (a miss re-streams over the LAN), so it
// takes a quarter of what is free and leaves the rest to the machine's owner.
inline constexpr uint64_t kShardCacheDefaultShareDivisor = 4;
// ... and at most 256 GiB by default: that holds the largest split a node takes of any model
// Shoal runs (a 405B model at 4 bits is about 230 GB whole); beyond it a cache would mostly keep
// shards of models nobody runs any more. --shard-cache-max-gb sets another cap.
inline constexpr uint64_t kShardCacheDefaultMaxBytes = uint64_t{256} << 30;
// Free disk a stream over the cap leaves to the machine's owner: the larger of 1 GiB and 1/20
// (5%) of the file system, so that a node never fills the disk (logs, the owner's files, and
// ext4's own reserve already begin at 5%).
inline constexpr uint64_t kShardCacheDiskMarginMinBytes = uint64_t{1} << 30;
inline constexpr uint64_t kShardCacheDiskMarginDivisor = 20;

class ShardCache {
 public:
  struct State;

  // Keeps one shard from eviction while it lives (a stage maps the file). Movable.
  class Pin {
   public:
    Pin(std::shared_ptr<State> state, std::string key);
    Pin(Pin&& other) noexcept = default;
    Pin& operator=(Pin&& other) noexcept;
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;
    ~Pin();

   private:
    void release();
    std::shared_ptr<State> m_state;
    std::string m_key;
  };

  // Room for one stream, grown tensor by tensor as the coordinator announces them; released by
  // the destructor unless committed.
  class Reservation {
   public:
    explicit Reservation(std::shared_ptr<State> state) : m_state(std::move(state)) {}
    ~Reservation();
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;

    // Reserve `bytes` more, evicting unpinned shards (least recently used first) as needed.
    // Over the cap (beside the shards in use) it is still granted while the disk has room for
    // this stream (the rest of it and the shard it becomes, diskRoomBytes); throws shoal::Error
    // with the numbers, evicting nothing, when the disk has not.
    void grow(uint64_t bytes);
    // The stream's shard was written to `shard`: count its real size instead of the
    // reservation, mark it used, evict others if it overshoots, and return it pinned.
    Pin commit(const std::filesystem::path& shard);

   private:
    std::shared_ptr<State> m_state;
    uint64_t m_bytes = 0;
    bool m_committed = false;
  };

  // Scans root (creating nothing), removes what interrupted streams left (.incoming-* folders,
  // *.tmp-* files), and evicts down to the cap. maxBytes 0: defaultMaxBytes().
  ShardCache(std::filesystem::path root, uint64_t maxBytes);
  ~ShardCache();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  // The default cap for a cache at `root` already holding `cachedBytes`: 1/4 of the free space
  // of root's file system plus what the cache holds (so the cap does not shrink as the cache
  // fills), at most kShardCacheDefaultMaxBytes.
  static uint64_t defaultMaxBytes(const std::filesystem::path& root, uint64_t cachedBytes);
  // What a stream over the cap may still write at `root`: the free space of its file system
  // minus the margin (kShardCacheDiskMargin*); 0 when that cannot be read.
  static uint64_t diskRoomBytes(const std::filesystem::path& root);

  // Where the shard of layers [first, last) of model `sha256` streamed by `owner` lives. An owner
  // that is not a plain device ID ([A-Za-z0-9_-], at most 128 characters) is replaced by a hash
  // of it, so no peer-chosen text becomes a path.
  std::filesystem::path pathFor(const std::string& owner, const std::string& sha256,
                                int32_t firstLayer, int32_t lastLayer) const;

  // The shards cached for `owner`: model SHA-256 and layer range of each (at most `most`).
  struct Shard {
    std::string sha256;
    int32_t firstLayer = 0;
    int32_t lastLayer = 0;
  };
  std::vector<Shard> shardsOf(const std::string& owner, size_t most) const;

  // The cached shard at `shard`, pinned and marked used now; nullopt when it is not cached.
  std::optional<Pin> acquire(const std::filesystem::path& shard);
  std::unique_ptr<Reservation> reserve();

  uint64_t maxBytes() const;
  uint64_t usedBytes() const;  // cached files + reservations of streams in flight
  bool contains(const std::filesystem::path& shard) const;

 private:
  std::shared_ptr<State> m_state;
};

}  // namespace shoal::lan
