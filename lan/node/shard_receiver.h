#pragma once
// Receives one stage's weights streamed by the coordinator (weights_chunk messages, see
// the protocol summary in node_host.h) and writes them as a weight shard: a GGUF v3 file with the
// model's metadata and only the stage's tensors, at the path the shard cache gives
// (shard_cache.h: <configDir>/shards/<coordinator>/<model sha256>/<first>-<last>.gguf), which
// ModelWeights::bindRange loads like the whole model.
//
// Chunks of one tensor arrive in order (offset == bytes received so far) and are written to a
// temporary folder of this receiver's own as they come, so a multi-GB stage is never held in
// memory and two streams never share a file; the shard is written (temp + rename) only once
// every required tensor arrived whole with a matching SHA-256.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/model_config.h"

namespace shoal::lan {

// What a stage over [firstLayer, lastLayer) needs from the model file, by tensor name: the
// architecture's tensor table (model::stageTensors) split by whether a tensor must exist.
// `optional` lists tensors that only some models have (rope_freqs.weight; output.weight, absent
// when the output is tied to the embedding; token_embd.weight for a head without the embedding,
// needed only when the output is tied): the coordinator sends those its file has, except
// token_embd.weight for such a head when the file has output.weight.
struct StageTensorList {
  std::vector<std::string> required;
  std::vector<std::string> optional;
};
StageTensorList stageTensorNames(const model::ModelConfig& config, int32_t firstLayer,
                                 int32_t lastLayer, bool embedding, bool head);

class ShardReceiver {
 public:
  // Called with each tensor's announced size before any of its bytes are accepted; throws to
  // refuse it (the shard cache makes room or refuses: shard_cache.h).
  using Reserve = std::function<void(uint64_t bytes)>;

  // metadata: the model's GGUF metadata, copied into the shard. maxBytes bounds the sum of the
  // announced tensor sizes (a peer cannot make the node fill its disk); reserve (may be empty)
  // is asked for room tensor by tensor.
  ShardReceiver(std::filesystem::path shardFile, std::vector<gguf::KeyValue> metadata,
                StageTensorList tensors, uint64_t maxBytes, Reserve reserve = {});
  ~ShardReceiver();  // removes the temporary files
  ShardReceiver(const ShardReceiver&) = delete;
  ShardReceiver& operator=(const ShardReceiver&) = delete;

  // One weights_chunk: {"tensor","offset","total","type","dims","sha256" (last chunk only)}.
  // Throws shoal::Error naming the tensor and the numbers for anything inconsistent: unknown
  // tensor, type/dims whose size is not `total`, out-of-order offset, overrun, hash mismatch.
  void addChunk(const nlohmann::json& control, std::span<const uint8_t> bytes);

  // Check every required tensor is complete and verified, then write the shard file. Throws
  // shoal::Error naming the first missing tensor.
  void finish();

  uint64_t bytesReceived() const { return m_bytesReceived; }

 private:
  struct Incoming {
    gguf::TensorType type = gguf::TensorType::F32;
    std::vector<int64_t> dims;
    uint64_t total = 0;
    uint64_t received = 0;
    bool verified = false;
    std::filesystem::path tempFile;
  };

  std::filesystem::path m_shardFile;
  std::filesystem::path m_tempDir;
  std::vector<gguf::KeyValue> m_metadata;
  StageTensorList m_tensors;
  uint64_t m_maxBytes;
  Reserve m_reserve;
  uint64_t m_announcedBytes = 0;
  uint64_t m_bytesReceived = 0;
  std::map<std::string, Incoming> m_incoming;
  std::string m_hashingTensor;  // the tensor m_hash is running over
  struct HashState;
  std::unique_ptr<HashState> m_hash;
};

}  // namespace shoal::lan
