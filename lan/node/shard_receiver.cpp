#include "lan/node/shard_receiver.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>

#include "engine/error.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/tensor_table.h"
#include "lan/node/request_fields.h"
#include "lan/pool/sha256.h"

namespace shoal::lan {

struct ShardReceiver::HashState {
  Sha256 hash;
};

StageTensorList stageTensorNames(const model::ModelConfig& c, int32_t firstLayer, int32_t lastLayer,
                                 bool embedding, bool head) {
  StageTensorList list;
  for (const model::StageTensor& t :
       model::stageTensors(c, firstLayer, lastLayer, embedding, head)) {
    (t.required ? list.required : list.optional).push_back(t.name);
  }
  return list;
}

ShardReceiver::ShardReceiver(std::filesystem::path shardFile, std::vector<gguf::KeyValue> metadata,
                             StageTensorList tensors, uint64_t maxBytes, Reserve reserve)
    : m_shardFile(std::move(shardFile)),
      m_metadata(std::move(metadata)),
      m_tensors(std::move(tensors)),
      m_maxBytes(maxBytes),
      m_reserve(std::move(reserve)) {
  // A folder of this receiver's own: another connection may stream the same shard at the same
  // time (ShardCache removes what a crash left of these at the next start).
  static std::atomic<uint64_t> serial{0};
  m_tempDir =
      m_shardFile.parent_path() / (".incoming-" + m_shardFile.stem().string() + "-" +
                                   std::to_string(::getpid()) + "-" + std::to_string(++serial));
  std::error_code ec;
  std::filesystem::remove_all(m_tempDir, ec);
  std::filesystem::create_directories(m_tempDir, ec);
  if (ec) throw Error(m_tempDir.string() + ": cannot create: " + ec.message());
}

ShardReceiver::~ShardReceiver() {
  std::error_code ec;
  std::filesystem::remove_all(m_tempDir, ec);
}

void ShardReceiver::addChunk(const nlohmann::json& control, std::span<const uint8_t> bytes) {
  const std::string name = stringField(control, "tensor");
  const auto listed = [&](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), name) != v.end();
  };
  if (!listed(m_tensors.required) && !listed(m_tensors.optional)) {
    throw Error("weights_chunk: tensor '" + name + "' is not one this stage asked for");
  }
  const uint64_t offset = unsignedField(control, "offset");
  const uint64_t total = unsignedField(control, "total");
  auto it = m_incoming.find(name);
  if (it == m_incoming.end()) {
    if (offset != 0) {
      throw Error("weights_chunk: tensor " + name + " starts at offset " + std::to_string(offset) +
                  ", expected 0");
    }
    Incoming in;
    const uint64_t type = unsignedField(control, "type");
    const uint32_t rawType = uint32_t(std::min<uint64_t>(type, 0xffffffff));
    const auto traits = gguf::typeTraits(rawType);
    if (!traits) {
      throw Error("weights_chunk: tensor " + name + " has unknown type " + std::to_string(rawType));
    }
    in.type = static_cast<gguf::TensorType>(rawType);
    const auto& dims = control.value("dims", nlohmann::json::array());
    if (!dims.is_array() || dims.empty() || dims.size() > 4) {
      throw Error("weights_chunk: tensor " + name + " has no valid dims");
    }
    uint64_t rows = 1;
    bool overflow = false;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (!dims[i].is_number_integer() || dims[i].get<int64_t>() <= 0 ||
          dims[i].get<int64_t>() > (int64_t{1} << 32)) {
        throw Error("weights_chunk: tensor " + name + " dimension " + std::to_string(i) +
                    " is not a positive size");
      }
      in.dims.push_back(dims[i].get<int64_t>());
      // Checked: dims of up to 2^32 each would wrap and could match a small `total`.
      if (i > 0) overflow |= __builtin_mul_overflow(rows, uint64_t(in.dims.back()), &rows);
    }
    uint64_t expected = 0;
    try {
      overflow |=
          __builtin_mul_overflow(uint64_t(gguf::rowBytes(in.type, in.dims[0])), rows, &expected);
    } catch (const Error& e) {
      throw Error("weights_chunk: tensor " + name + ": " + e.what());
    }
    if (overflow) throw Error("weights_chunk: tensor " + name + ": its dims overflow 64 bits");
    if (total != expected) {
      throw Error("weights_chunk: tensor " + name + " announces " + std::to_string(total) +
                  " bytes, its type and dims make " + std::to_string(expected));
    }
    if (total > m_maxBytes || m_announcedBytes + total > m_maxBytes) {
      throw Error("weights_chunk: stage weights would exceed the limit of " +
                  std::to_string(m_maxBytes) + " bytes");
    }
    if (m_reserve) m_reserve(total);
    m_announcedBytes += total;
    in.total = total;
    in.tempFile = m_tempDir / (std::to_string(m_incoming.size()) + ".bin");
    it = m_incoming.emplace(name, std::move(in)).first;
    m_hash = std::make_unique<HashState>();
    m_hashingTensor = name;
  }
  Incoming& in = it->second;
  if (in.verified || name != m_hashingTensor) {
    throw Error("weights_chunk: tensor " + name + " resent or interleaved with another tensor");
  }
  if (offset != in.received || total != in.total) {
    throw Error("weights_chunk: tensor " + name + " chunk at offset " + std::to_string(offset) +
                " (total " + std::to_string(total) + "), expected offset " +
                std::to_string(in.received) + " (total " + std::to_string(in.total) + ")");
  }
  if (bytes.size() > in.total - in.received) {
    throw Error("weights_chunk: tensor " + name + " chunk of " + std::to_string(bytes.size()) +
                " bytes runs past its total " + std::to_string(in.total));
  }
  {
    std::ofstream out(in.tempFile, std::ios::binary | std::ios::app);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) throw Error(in.tempFile.string() + ": write failed (disk full?)");
  }
  m_hash->hash.update(bytes);
  in.received += bytes.size();
  m_bytesReceived += bytes.size();
  if (in.received == in.total) {
    const std::string want = stringField(control, "sha256");
    const std::string got = m_hash->hash.hexDigest();
    m_hash.reset();
    m_hashingTensor.clear();
    if (want != got) {
      throw Error("weights_chunk: tensor " + name + " SHA-256 " + got + " does not match " +
                  (want.empty() ? std::string("(none sent)") : want));
    }
    in.verified = true;
  }
}

void ShardReceiver::finish() {
  for (const auto& name : m_tensors.required) {
    const auto it = m_incoming.find(name);
    if (it == m_incoming.end() || !it->second.verified) {
      throw Error("weights_done: tensor " + name + " was not received whole");
    }
  }
  gguf::Writer w;
  for (const auto& kv : m_metadata) w.set(kv.key, kv.value);
  for (const auto& [name, in] : m_incoming) {
    if (!in.verified) throw Error("weights_done: tensor " + name + " was not received whole");
    const size_t rowBytes = gguf::rowBytes(in.type, in.dims[0]);
    const auto file = in.tempFile;
    w.addTensorStreamed(
        name, in.type, in.dims, [file, rowBytes](int64_t firstRow, int64_t rowCount, uint8_t* dst) {
          std::ifstream f(file, std::ios::binary);
          f.seekg(static_cast<std::streamoff>(firstRow) * static_cast<std::streamoff>(rowBytes));
          f.read(reinterpret_cast<char*>(dst),
                 static_cast<std::streamsize>(rowBytes * size_t(rowCount)));
          if (!f) throw Error(file.string() + ": short read writing the shard");
        });
  }
  // Written inside the temporary folder, then renamed over the shard: Writer's own temp name
  // is per process, and two connections may finish the same shard at once. A stage still
  // mapping an older file of that name keeps the old inode.
  const auto written = m_tempDir / "shard.gguf";
  w.write(written);
  std::error_code ec;
  std::filesystem::rename(written, m_shardFile, ec);
  if (ec) throw Error(m_shardFile.string() + ": cannot move the written shard in: " + ec.message());
}

}  // namespace shoal::lan
