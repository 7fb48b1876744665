#include "kernels/vulkan/vk_ops.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"

namespace shoal::vulkan {
namespace {

constexpr uint32_t kGroup = 64;  // workgroup size of every kernel (power of two)

uint32_t groups(uint64_t n, uint32_t size) { return static_cast<uint32_t>((n + size - 1) / size); }

std::string typeSuffix(gguf::TensorType t) {
  switch (t) {
    case gguf::TensorType::Q4_0:
      return "q4_0";
    case gguf::TensorType::Q4_1:
      return "q4_1";
    case gguf::TensorType::Q8_0:
      return "q8_0";
    case gguf::TensorType::Q4_K:
      return "q4_k";
    case gguf::TensorType::Q6_K:
      return "q6_k";
    case gguf::TensorType::MXFP4:
      return "mxfp4";
    case gguf::TensorType::Q5_0:
      return "q5_0";
    case gguf::TensorType::Q5_1:
      return "q5_1";
    case gguf::TensorType::Q2_K:
      return "q2_k";
    case gguf::TensorType::Q3_K:
      return "q3_k";
    case gguf::TensorType::Q5_K:
      return "q5_k";
    case gguf::TensorType::IQ4_NL:
      return "iq4_nl";
    case gguf::TensorType::IQ4_XS:
      return "iq4_xs";
    case gguf::TensorType::F16:
      return "f16";
    case gguf::TensorType::F32:
      return "f32";
    default:
      throw Error("Vulkan: no kernels for weight type " + std::string(gguf::typeTraits(t).name));
  }
}

uint64_t matrixBytes(const DeviceMatrix& w) { return static_cast<uint64_t>(w.rows) * w.rowBytes; }

}  // namespace

bool supportedWeightType(gguf::TensorType t) {
  using gguf::TensorType;
  switch (t) {
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
    case TensorType::MXFP4:
    case TensorType::F16:
    case TensorType::F32:
      return true;
    default:
      return false;
  }
}

bool quantizesActivations(gguf::TensorType t) {
  using gguf::TensorType;
  return t == TensorType::Q4_0 || t == TensorType::Q4_1 || t == TensorType::Q8_0;
}

namespace {

// Whether attention runs the split kernel (attention_split.comp): default math and a head size
// its four-key loads take. Otherwise the whole-context kernel (attention.comp), whose scores live
// in shared memory.
bool splitKernel(const Device& device, uint32_t headDim) {
  return !device.exactMath() && headDim % 4 == 0;
}

// Query heads per split-attention workgroup: the largest divisor of the heads sharing a KV head
// up to 8 (attention_split.comp's GROUP: registers per invocation grow with it).
uint32_t attentionGroup(uint32_t heads, uint32_t kvHeads) {
  const uint32_t shared = heads / kvHeads;
  uint32_t g = std::min<uint32_t>(shared, 8);
  while (shared % g != 0) --g;
  return g;
}

// Tokens per split-attention workgroup (TOKENS): a batch fills the workgroup's 8 query rows with
// several tokens, so each key and value read serves them all.
uint32_t attentionTokens(uint32_t heads, uint32_t kvHeads, uint32_t tokens) {
  return std::clamp<uint32_t>(8 / attentionGroup(heads, kvHeads), 1, std::max<uint32_t>(tokens, 1));
}

// Workgroups of one split.
uint64_t attentionGroupsPerSplit(uint32_t heads, uint32_t kvHeads, uint32_t tokens) {
  const uint32_t perWorkgroup = attentionTokens(heads, kvHeads, tokens);
  return uint64_t{heads} / attentionGroup(heads, kvHeads) *
         ((tokens + perWorkgroup - 1) / perWorkgroup);
}

}  // namespace

uint32_t attentionSplits(uint32_t heads, uint32_t kvHeads, uint32_t tokens,
                         uint32_t contextLength) {
  // Splits of at most 2048 positions of a full context: a workgroup's loops stay far below
  // llvmpipe's cap of 65535 loop iterations per invocation (gallivm's
  // LP_MAX_TGSI_LOOP_ITERATIONS, shared by every loop of a shader: past it lavapipe silently
  // ends the loops), and a long context spreads over many workgroups on a GPU. When few tokens
  // attend, more splits (up to 32, each at least 256 positions) fill a large GPU with a few
  // hundred workgroups.
  constexpr uint32_t kMaxSplitPositions = 2048, kMinSplitPositions = 256;
  constexpr uint32_t kTargetGroups = 256, kMaxFillSplits = 32;
  const uint32_t needed = (contextLength + kMaxSplitPositions - 1) / kMaxSplitPositions;
  const uint64_t perSplit = attentionGroupsPerSplit(heads, kvHeads, tokens);
  const uint64_t fill =
      std::min<uint64_t>((kTargetGroups + perSplit - 1) / perSplit,
                         std::min(kMaxFillSplits, contextLength / kMinSplitPositions));
  return std::max<uint32_t>({needed, static_cast<uint32_t>(fill), 1});
}

uint64_t attentionScratchBytes(uint32_t heads, uint32_t kvHeads, uint32_t headDim,
                               uint32_t maxTokens, uint32_t contextLength) {
  uint64_t most = 0;
  for (uint32_t t = 1; t <= std::min(maxTokens, kAttentionTokensPerPass); ++t) {
    const uint32_t splits = attentionSplits(heads, kvHeads, t, contextLength);
    if (splits > 1) most = std::max(most, uint64_t{t} * heads * splits * (headDim + 2) * 4);
  }
  return most;
}

bool attentionFits(const Device& device, uint32_t headDim, int32_t contextLength) {
  if (splitKernel(device, headDim)) return true;
  // scores[contextLength] + qh[256] + red[kGroup] floats.
  const uint64_t bytes = (static_cast<uint64_t>(contextLength) + 256 + kGroup) * 4;
  return bytes <= device.physical().maxSharedMemory;
}

// Push constants in the std430 layout of the shaders: device addresses 8-aligned, then 32-bit
// scalars, in declaration order.
class Recorder::Push {
 public:
  Push& ref(VkDeviceAddress a) {
    m_size = (m_size + 7) / 8 * 8;
    put(&a, 8);
    return *this;
  }
  Push& u32(uint32_t v) {
    put(&v, 4);
    return *this;
  }
  Push& f32(float v) {
    put(&v, 4);
    return *this;
  }
  const uint8_t* data() const { return m_bytes; }
  uint32_t size() const { return (m_size + 7) / 8 * 8; }

 private:
  void put(const void* p, uint32_t n) {
    if (m_size + n > kPushConstantBytes) throw Error("Vulkan: push constants overflow");
    std::memcpy(m_bytes + m_size, p, n);
    m_size += n;
  }
  uint8_t m_bytes[kPushConstantBytes] = {};
  uint32_t m_size = 0;
};

Recorder::Recorder(Device& device, VkCommandBuffer commands, VkQueryPool timestamps,
                   uint32_t queries)
    : m_device(device), m_cb(commands), m_timestamps(timestamps), m_queries(queries) {
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  check(device.api().vkBeginCommandBuffer(m_cb, &bi), "vkBeginCommandBuffer");
  if (m_timestamps && m_queries > 0) {
    device.api().vkCmdResetQueryPool(m_cb, m_timestamps, 0, m_queries);
    device.api().vkCmdWriteTimestamp(m_cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, m_timestamps, 0);
  }
}

void Recorder::finish() { check(m_device.api().vkEndCommandBuffer(m_cb), "vkEndCommandBuffer"); }

void Recorder::barrier() {
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                     VK_ACCESS_HOST_READ_BIT;
  m_device.api().vkCmdPipelineBarrier(
      m_cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
          VK_PIPELINE_STAGE_HOST_BIT,
      0, 1, &mb, 0, nullptr, 0, nullptr);
}

void Recorder::dispatch(const std::string& shader, const std::vector<uint32_t>& constants,
                        const Push& push, uint32_t x, uint32_t y, uint32_t z) {
  if (x == 0 || y == 0 || z == 0) {
    m_weightBytes = 0;
    return;
  }
  const VkApi& api = m_device.api();
  const Pipeline& p = m_device.pipeline(shader, constants);
  api.vkCmdBindPipeline(m_cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  api.vkCmdPushConstants(m_cb, m_device.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push.size(),
                         push.data());
  api.vkCmdDispatch(m_cb, x, y, z);
  m_records.push_back({shader, m_weightBytes});
  m_weightBytes = 0;
  barrier();
  if (m_timestamps && m_records.size() < m_queries) {
    api.vkCmdWriteTimestamp(m_cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, m_timestamps,
                            static_cast<uint32_t>(m_records.size()));
  }
}

void Recorder::copy(const Allocation& src, const Allocation& dst, VkDeviceSize bytes) {
  VkBufferCopy region{src.offset, dst.offset, bytes};
  m_device.api().vkCmdCopyBuffer(m_cb, src.buffer, dst.buffer, 1, &region);
  barrier();
}

void Recorder::matmul(const DeviceMatrix& w, VkDeviceAddress x, VkDeviceAddress y,
                      uint32_t tokens) {
  // From 4 tokens on, reading each weight once per 32-token tile beats re-reading it per token.
  if (tokens >= 4) {
    matmat(w, x, y, tokens);
  } else {
    matvec(w, x, y, tokens);
  }
}

void Recorder::matvec(const DeviceMatrix& w, VkDeviceAddress x, VkDeviceAddress y,
                      uint32_t tokens) {
  Push push;
  push.ref(w.memory.address).ref(w.memory.address).ref(x).ref(y);
  push.u32(static_cast<uint32_t>(w.rows)).u32(static_cast<uint32_t>(w.cols));
  push.u32(static_cast<uint32_t>(w.rowBytes));
  const std::string name =
      "matvec_" + typeSuffix(w.type) + (m_device.useSubgroups() ? "_subgroup" : "");
  m_weightBytes = matrixBytes(w) * tokens;  // a workgroup per (row, token)
  dispatch(name, {kGroup}, push, static_cast<uint32_t>(w.rows), tokens);
}

void Recorder::matmat(const DeviceMatrix& w, VkDeviceAddress x, VkDeviceAddress y,
                      uint32_t tokens) {
  Push push;
  push.ref(w.memory.address).ref(w.memory.address).ref(x).ref(y);
  push.u32(static_cast<uint32_t>(w.rows)).u32(static_cast<uint32_t>(w.cols));
  push.u32(static_cast<uint32_t>(w.rowBytes)).u32(tokens);
  // matmat.comp: 128 invocations per tile of 64 rows x 32 tokens, so each weight is decoded once
  // per 32 tokens; groups stride over row tiles past Vulkan's guaranteed 65535.
  constexpr uint32_t kTileRows = 64, kTileTokens = 32;
  m_weightBytes = matrixBytes(w) * groups(tokens, kTileTokens);
  dispatch("matmat_" + typeSuffix(w.type), {128}, push,
           static_cast<uint32_t>(std::min<uint64_t>(groups(uint64_t(w.rows), kTileRows), 65535)),
           groups(tokens, kTileTokens));
}

namespace {

// Invocations per row of the integer mat-vec and the block mat-vec: about two 32-element blocks
// each, 8 to 64 (at least the tokens of either kernel's tile: lane t writes token t).
uint32_t q8Lanes(int64_t cols) {
  uint32_t lanes = kGroup;
  while (lanes > 8 && int64_t{lanes} * 2 > cols / 32) lanes /= 2;
  return lanes;
}

// The block mat-vec's shader for a weight type: matvec_block[_id]_<type>[_subgroup][_dot].
std::string blockShader(const Device& device, gguf::TensorType type, bool experts) {
  return std::string(experts ? "matvec_block_id_" : "matvec_block_") + typeSuffix(type) +
         (device.useSubgroups() ? "_subgroup" : "") +
         (device.useIntegerDot() && quantizesActivations(type) ? "_dot" : "");
}

// Rows per slot of the block mat-vec for `rows` rows in `slots` slots per workgroup, the grid
// repeated `copies` times (the experts' entries): 4 (an activation chunk loaded or quantized
// once for 4 rows) while that leaves 256 workgroups or more to spread over a GPU's compute
// units, else fewer. A CPU implementation (lavapipe) runs a workgroup per thread and always
// takes 4: measured there on the default model, 4 rows per slot decode 2.3 tokens/s, 1 row 1.6.
uint32_t blockRowsPerSlot(const Device& device, uint64_t rows, uint64_t slots, uint64_t copies) {
  const uint64_t minGroups = device.physical().info.type == "cpu" ? 1 : 256;
  uint32_t perSlot = 4;
  while (perSlot > 1 && groups(rows, slots * perSlot) * copies < minGroups) perSlot /= 2;
  return perSlot;
}

}  // namespace

bool Recorder::canMatvecBlocks(const DeviceMatrix& w, VkDeviceAddress x, uint32_t tokens) const {
  // Decode batches (a larger batch reads each weight once per 8 or 32 tokens in the others),
  // chunks of 32 columns, 16-byte activation loads, 32-bit byte offsets into the matrix.
  return !m_device.exactMath() && tokens > 0 && tokens < kBlockMatvecTokens && w.cols % 32 == 0 &&
         x % 16 == 0 && static_cast<uint64_t>(w.rows) * w.rowBytes <= 0xffffffffull;
}

void Recorder::matvecBlocks(std::span<const MatvecOut> outs, VkDeviceAddress x, uint32_t tokens,
                            MatvecEpilogue epilogue, uint32_t rowsPerSlot) {
  if (rowsPerSlot != 0 && rowsPerSlot != 1 && rowsPerSlot != 2 && rowsPerSlot != 4) {
    throw Error("Vulkan matvec: 1, 2 or 4 rows per slot");
  }
  if (outs.empty() || outs.size() > 3) throw Error("Vulkan matvec: 1 to 3 matrices per dispatch");
  const DeviceMatrix& w0 = *outs[0].w;
  uint64_t total = 0;
  for (const MatvecOut& o : outs) {
    if (o.w->type != w0.type || o.w->cols != w0.cols || o.w->rowBytes != w0.rowBytes ||
        !canMatvecBlocks(*o.w, x, tokens)) {
      throw Error("Vulkan matvec: matrices the block kernel cannot take together");
    }
    total += static_cast<uint64_t>(o.w->rows);
  }
  if (epilogue == MatvecEpilogue::SwiGlu) {
    if (outs.size() != 2 || outs[1].w->rows != w0.rows || outs[0].bias || outs[1].bias) {
      throw Error("Vulkan matvec: SwiGLU takes a gate and an up matrix of equal rows");
    }
    total = static_cast<uint64_t>(w0.rows);
  }
  if (total > 0xffffffffull) throw Error("Vulkan matvec: too many rows");
  Push push;
  for (size_t i = 0; i < 3; ++i) push.ref(i < outs.size() ? outs[i].w->memory.address : 0);
  for (size_t i = 0; i < 3; ++i) push.ref(i < outs.size() ? outs[i].y : 0);
  push.ref(x);
  for (size_t i = 0; i < 3; ++i) push.ref(i < outs.size() ? outs[i].bias : 0);
  for (size_t i = 0; i < 3; ++i) {
    push.u32(i < outs.size() ? static_cast<uint32_t>(outs[i].w->rows) : 0);
  }
  push.u32(static_cast<uint32_t>(w0.cols)).u32(static_cast<uint32_t>(w0.rowBytes)).u32(tokens);
  push.u32(static_cast<uint32_t>(epilogue));
  // matmulQ8's lanes (which the integer path's rounding shares): about two chunks per lane, 8 to
  // 64 lanes, so short rows share a workgroup.
  const uint32_t lanes = q8Lanes(w0.cols);
  const uint64_t slots = kGroup / lanes;
  const uint32_t rows =
      rowsPerSlot != 0 ? rowsPerSlot : blockRowsPerSlot(m_device, total, slots, 1);
  const uint64_t rowGroups = groups(total, slots * rows);
  const std::string name = blockShader(m_device, w0.type, false);
  for (const MatvecOut& o : outs)
    m_weightBytes += matrixBytes(*o.w) * groups(tokens, kBlockMatvecTokens);
  dispatch(name, {kGroup, lanes, rows}, push,
           static_cast<uint32_t>(std::min<uint64_t>(rowGroups, 65535)),
           groups(tokens, kBlockMatvecTokens));
}

void Recorder::quantizeQ8(VkDeviceAddress x, const QuantizedActivations& act, uint32_t cols,
                          uint32_t tokens) {
  if (cols % 32 != 0) throw Error("Vulkan quantize: row of " + std::to_string(cols) + " elements");
  const uint32_t blocks = cols / 32 * tokens;
  Push push;
  push.ref(x).ref(act.qs).ref(act.d).ref(act.s).u32(blocks);
  dispatch("quantize_q8", {kGroup}, push, groups(blocks, kGroup));
}

void Recorder::matmulQ8(const DeviceMatrix& w, const QuantizedActivations& act, VkDeviceAddress y,
                        uint32_t tokens, bool decodeOrder) {
  if (!quantizesActivations(w.type)) {
    throw Error("Vulkan: no integer kernel for weight type " +
                std::string(gguf::typeTraits(w.type).name));
  }
  Push push;
  push.ref(w.memory.address).ref(act.qs).ref(act.d).ref(act.s).ref(y);
  push.u32(static_cast<uint32_t>(w.rows)).u32(static_cast<uint32_t>(w.cols));
  push.u32(static_cast<uint32_t>(w.rowBytes)).u32(tokens);
  const std::string name = "matvec_q8_" + typeSuffix(w.type);
  if (m_device.exactMath()) {
    // One invocation per (row, token), in the CPU's order.
    m_weightBytes = matrixBytes(w) * tokens;
    dispatch(name, {kGroup}, push, groups(static_cast<uint64_t>(w.rows), kGroup), tokens);
    return;
  }
  if (tokens >= kTiledQ8Tokens && !decodeOrder) {
    // matmat_q8.comp: 128 invocations per tile of 64 rows x 32 tokens, so each weight is read
    // once per 32 tokens; groups stride over row tiles past Vulkan's guaranteed 65535.
    constexpr uint32_t kTileRows = 64, kTileTokens = 32;
    m_weightBytes = matrixBytes(w) * groups(tokens, kTileTokens);
    dispatch("matmat_q8_" + typeSuffix(w.type) + (m_device.useIntegerDot() ? "_dot" : ""), {128},
             push,
             static_cast<uint32_t>(std::min<uint64_t>(groups(uint64_t(w.rows), kTileRows), 65535)),
             groups(tokens, kTileTokens));
    return;
  }
  // A workgroup of 64 invocations takes 64 / lanes rows, `lanes` invocations per row over its
  // blocks: about two blocks per lane, 8 to 64 lanes (at least the 8 tokens of a tile: lane t
  // writes token t). So 4096 columns (128 blocks) get 64 lanes and one row per group, and
  // SmolLM2's 576 (18 blocks) 8 lanes and 8 rows per group: a 49152-row head is 6144 groups,
  // not 49152. Groups stride over rows past Vulkan's guaranteed 65535, and each covers
  // kQ8TokensPerGroup tokens (matvec_q8.comp TOKENS).
  constexpr uint32_t kQ8TokensPerGroup = 8;
  const uint32_t lanes = q8Lanes(w.cols);
  const uint64_t rowGroups = groups(static_cast<uint64_t>(w.rows), kGroup / lanes);
  m_weightBytes = matrixBytes(w) * groups(tokens, kQ8TokensPerGroup);
  dispatch(name + (m_device.useSubgroups() ? "_subgroup" : "") +
               (m_device.useIntegerDot() ? "_dot" : ""),
           {kGroup, lanes}, push, static_cast<uint32_t>(std::min<uint64_t>(rowGroups, 65535)),
           groups(tokens, kQ8TokensPerGroup));
}

void Recorder::embed(const DeviceMatrix& w, VkDeviceAddress tokens, VkDeviceAddress y,
                     uint32_t count) {
  Push push;
  push.ref(w.memory.address).ref(w.memory.address).ref(tokens).ref(y);
  push.u32(static_cast<uint32_t>(w.cols)).u32(static_cast<uint32_t>(w.rowBytes)).u32(count);
  m_weightBytes = uint64_t{count} * w.rowBytes;  // the tokens' rows
  dispatch("embed_" + typeSuffix(w.type), {kGroup}, push,
           groups(static_cast<uint64_t>(count) * static_cast<uint64_t>(w.cols), kGroup));
}

void Recorder::rmsNorm(VkDeviceAddress x, VkDeviceAddress weight, VkDeviceAddress y, uint32_t n,
                       uint32_t rows, uint32_t firstRow, float eps) {
  Push push;
  push.ref(x).ref(weight).ref(y).ref(0).ref(0).ref(0).u32(n).u32(firstRow).f32(eps).u32(rows).u32(
      0);
  dispatch("rms_norm", {kGroup}, push, rows);
}

void Recorder::rmsNormPair(const NormRows& a, const NormRows& b, float eps) {
  if (uint64_t{a.rows} + b.rows > 65535) throw Error("Vulkan: too many rows for one RMSNorm");
  Push push;
  push.ref(a.x).ref(a.weight).ref(a.y).ref(b.x).ref(b.weight).ref(b.y);
  push.u32(a.n).u32(0).f32(eps).u32(a.rows).u32(b.n);
  dispatch("rms_norm", {kGroup}, push, a.rows + b.rows);
}

void Recorder::rope(VkDeviceAddress x, VkDeviceAddress cosTable, VkDeviceAddress sinTable,
                    VkDeviceAddress params, uint32_t heads, uint32_t headDim, uint32_t nRot,
                    bool neox, uint32_t count) {
  Push push;
  push.ref(x).ref(cosTable).ref(sinTable).ref(params);
  push.u32(heads).u32(headDim).u32(nRot).u32(neox ? 1 : 0).u32(count);
  dispatch("rope", {kGroup}, push, groups(uint64_t{count} * heads * (nRot / 2), kGroup));
}

bool Recorder::exactMath() const { return m_device.exactMath(); }

namespace {
constexpr uint32_t kTopKChunk = 1024;  // topk.comp CHUNK
}  // namespace

uint64_t topKScratchBytes(uint32_t rows, uint32_t vocab, uint32_t k) {
  // The first level's output is the largest intermediate one.
  const uint64_t chunks = groups(vocab, kTopKChunk);
  return chunks > 1 ? uint64_t{rows} * chunks * k * 4 : 0;
}

void Recorder::topK(VkDeviceAddress logits, uint32_t rows, uint32_t vocab, uint32_t k,
                    const TopKScratch& scratch, VkDeviceAddress values, VkDeviceAddress ids) {
  if (k == 0 || k > kMaxDeviceTopK) throw Error("Vulkan top-k: k of 1 to 64");
  VkDeviceAddress inValues = logits, inIds = 0;
  uint32_t width = vocab;
  for (uint32_t level = 0;; ++level) {
    const uint32_t chunks = static_cast<uint32_t>(groups(width, kTopKChunk));
    const bool last = chunks == 1;
    const VkDeviceAddress outValues = last ? values : scratch.values[level % 2];
    const VkDeviceAddress outIds = last ? ids : scratch.ids[level % 2];
    if (!last && (outValues == 0 || outIds == 0)) throw Error("Vulkan top-k: no scratch");
    Push push;
    push.ref(inValues).ref(inIds ? inIds : inValues).ref(outValues).ref(outIds);
    push.u32(width).u32(level);
    dispatch("topk", {256, k}, push, chunks, rows);
    if (last) return;
    inValues = outValues;
    inIds = outIds;
    width = chunks * k;
  }
}

bool ropeStoreFits(uint32_t qHeads, uint32_t kvHeads, uint32_t headDim, uint32_t nRot,
                   uint32_t count) {
  const uint64_t perToken = uint64_t{qHeads} * (headDim / 2) + uint64_t{kvHeads} * headDim;
  return nRot % 2 == 0 && headDim % 2 == 0 && nRot <= headDim &&
         groups(perToken * count, kGroup) <= 65535;
}

void Recorder::ropeStore(VkDeviceAddress q, VkDeviceAddress k, VkDeviceAddress v,
                         VkDeviceAddress keyCache, VkDeviceAddress valueCache,
                         VkDeviceAddress cosTable, VkDeviceAddress sinTable, VkDeviceAddress params,
                         uint32_t qHeads, uint32_t kvHeads, uint32_t headDim, uint32_t nRot,
                         bool neox, uint32_t count, float qScale, uint32_t ring) {
  if (m_device.exactMath()) throw Error("Vulkan: the fused RoPE and cache store is default math");
  if (!ropeStoreFits(qHeads, kvHeads, headDim, nRot, count)) {
    throw Error("Vulkan: a RoPE and cache store the fused kernel cannot take");
  }
  Push push;
  push.ref(q).ref(k).ref(v).ref(keyCache).ref(valueCache).ref(cosTable).ref(sinTable).ref(params);
  push.u32(qHeads).u32(kvHeads).u32(headDim).u32(nRot).u32(neox ? 1 : 0).u32(count).f32(qScale);
  push.u32(ring);
  const uint64_t perToken = uint64_t{qHeads} * (headDim / 2) + uint64_t{kvHeads} * headDim;
  dispatch("rope_store", {kGroup}, push, groups(perToken * count, kGroup));
}

void Recorder::kvStore(VkDeviceAddress k, VkDeviceAddress v, VkDeviceAddress keyCache,
                       VkDeviceAddress valueCache, VkDeviceAddress params, uint32_t kvDim,
                       uint32_t count, uint32_t ring) {
  Push push;
  push.ref(k).ref(v).ref(keyCache).ref(valueCache).ref(params).u32(kvDim).u32(count).u32(ring);
  dispatch("kv_store", {kGroup}, push, groups(uint64_t{count} * kvDim, kGroup));
}

void Recorder::attention(VkDeviceAddress q, VkDeviceAddress keyCache, VkDeviceAddress valueCache,
                         VkDeviceAddress y, VkDeviceAddress params, uint32_t heads,
                         uint32_t kvHeads, uint32_t headDim, float scale, uint32_t count,
                         uint32_t contextLength, VkDeviceAddress scratch,
                         const AttentionOptions& options) {
  if (headDim > 256) throw Error("Vulkan attention: head size above 256");
  if (kvHeads == 0 || heads % kvHeads != 0) {
    throw Error("Vulkan attention: " + std::to_string(heads) + " query heads over " +
                std::to_string(kvHeads) + " KV heads");
  }
  if (splitKernel(m_device, headDim)) {
    // The batch in passes of at most kAttentionTokensPerPass tokens, which bounds the scratch.
    for (uint32_t first = 0; first < count; first += kAttentionTokensPerPass) {
      const uint32_t n = std::min(count - first, kAttentionTokensPerPass);
      const uint64_t rowOffset = uint64_t{first} * heads * headDim * 4;
      splitAttention(q + rowOffset, keyCache, valueCache, y + rowOffset, params, heads, kvHeads,
                     headDim, scale, first, n, contextLength, scratch, options);
    }
    return;
  }
  if (!attentionFits(m_device, headDim, static_cast<int32_t>(contextLength))) {
    throw Error("Vulkan attention: a context of " + std::to_string(contextLength) +
                " positions does not fit the exact-math kernel's shared memory");
  }
  Push push;
  push.ref(q).ref(keyCache).ref(valueCache).ref(y).ref(params).ref(options.sinks);
  push.u32(heads).u32(kvHeads).u32(headDim).f32(scale);
  push.u32(options.window).f32(options.softcap).u32(options.sinks != 0 ? 1 : 0).u32(options.ring);
  dispatch("attention", {kGroup, contextLength}, push, heads, count);
}

void Recorder::splitAttention(VkDeviceAddress q, VkDeviceAddress keyCache,
                              VkDeviceAddress valueCache, VkDeviceAddress y, VkDeviceAddress params,
                              uint32_t heads, uint32_t kvHeads, uint32_t headDim, float scale,
                              uint32_t firstToken, uint32_t count, uint32_t contextLength,
                              VkDeviceAddress scratch, const AttentionOptions& options) {
  const uint32_t group = attentionGroup(heads, kvHeads);
  const uint32_t tokens = attentionTokens(heads, kvHeads, count);
  const uint32_t splits = attentionSplits(heads, kvHeads, count, contextLength);
  if (splits > 1 && scratch == 0) throw Error("Vulkan attention: no scratch for split attention");
  // Several splits: partial outputs first in the scratch, then their (max, sum) pairs.
  const VkDeviceAddress parts = splits > 1 ? scratch : y;
  const VkDeviceAddress ml = parts + uint64_t{count} * heads * splits * headDim * 4;
  Push push;
  push.ref(q).ref(keyCache).ref(valueCache).ref(parts).ref(ml).ref(params).ref(options.sinks);
  push.u32(heads).u32(kvHeads).u32(headDim).f32(scale);
  push.u32(options.window).f32(options.softcap).u32(options.sinks != 0 ? 1 : 0).u32(splits);
  push.u32(firstToken).u32(count).u32(options.ring);
  dispatch(m_device.useSubgroups() ? "attention_split_subgroup" : "attention_split",
           {kGroup, group, tokens}, push, heads / group, splits, groups(count, tokens));
  if (splits > 1) {
    Push merge;
    merge.ref(parts).ref(ml).ref(y).ref(options.sinks);
    merge.u32(heads).u32(headDim).u32(splits).u32(options.sinks != 0 ? 1 : 0);
    dispatch("attention_merge", {kGroup}, merge, heads, count);
  }
}

void Recorder::swiglu(VkDeviceAddress gate, VkDeviceAddress up, uint32_t n, uint32_t rowLen) {
  Push push;
  push.ref(gate).ref(up).u32(n).u32(rowLen);
  dispatch("swiglu", {kGroup}, push, groups(n, kGroup));
}

void Recorder::matvecExperts(const DeviceMatrix& w, int64_t rowsPerExpert, VkDeviceAddress ids,
                             VkDeviceAddress x, VkDeviceAddress y, uint32_t entries, uint32_t used,
                             bool xPerEntry) {
  if (rowsPerExpert <= 0 || w.rows % rowsPerExpert != 0) {
    throw Error("Vulkan experts: " + std::to_string(w.rows) + " rows are not whole experts of " +
                std::to_string(rowsPerExpert));
  }
  const uint64_t matrixBytes = static_cast<uint64_t>(rowsPerExpert) * w.rowBytes;
  if (static_cast<uint64_t>(w.rows) * w.rowBytes > 0xffffffffull) {
    throw Error("Vulkan experts: an expert tensor of 4 GiB or more");
  }
  if (entries > 65535) {  // Vulkan's guaranteed maxComputeWorkGroupCount[1]
    throw Error("Vulkan experts: " + std::to_string(entries) +
                " (token, expert) entries in one batch (at most 65535)");
  }
  m_weightBytes = uint64_t{entries} * matrixBytes;  // each entry's expert matrix
  const uint32_t rows = static_cast<uint32_t>(rowsPerExpert);
  if (!m_device.exactMath() && w.cols % 32 == 0 && x % 16 == 0) {
    // The block mat-vec's experts variant (matvec_block.comp EXPERTS): whole chunks, several
    // rows per slot, 8-bit activations for Q4_0/Q4_1/Q8_0 as the CPU's mul_mat_id.
    Push push;
    push.ref(w.memory.address).ref(y).ref(x).ref(ids);
    push.u32(rows).u32(static_cast<uint32_t>(w.cols)).u32(static_cast<uint32_t>(w.rowBytes));
    push.u32(static_cast<uint32_t>(matrixBytes)).u32(used).u32(xPerEntry ? 1 : 0);
    const uint32_t lanes = q8Lanes(w.cols), slots = kGroup / lanes;
    const uint32_t perSlot = blockRowsPerSlot(m_device, rows, slots, entries);
    const std::string name = blockShader(m_device, w.type, true);
    dispatch(
        name, {kGroup, lanes, perSlot}, push,
        static_cast<uint32_t>(std::min<uint64_t>(groups(rows, uint64_t{slots} * perSlot), 65535)),
        entries);
    return;
  }
  Push push;
  push.ref(w.memory.address).ref(w.memory.address).ref(x).ref(y).ref(ids);
  push.u32(rows).u32(static_cast<uint32_t>(w.cols));
  push.u32(static_cast<uint32_t>(w.rowBytes)).u32(static_cast<uint32_t>(matrixBytes));
  push.u32(used).u32(xPerEntry ? 1 : 0);
  const std::string name =
      "matvec_id_" + typeSuffix(w.type) + (m_device.useSubgroups() ? "_subgroup" : "");
  dispatch(name, {kGroup}, push, rows, entries);
}

void Recorder::moeRoute(VkDeviceAddress logits, VkDeviceAddress ids, VkDeviceAddress weights,
                        uint32_t rows, uint32_t experts, uint32_t used, bool softmaxOfChosen,
                        bool normalize) {
  if (experts > 256 || used == 0 || used > experts) {
    throw Error("Vulkan experts: " + std::to_string(used) + " of " + std::to_string(experts) +
                " experts (at most 256)");
  }
  Push push;
  push.ref(logits).ref(ids).ref(weights);
  push.u32(rows).u32(experts).u32(used).u32(softmaxOfChosen ? 1 : 0).u32(normalize ? 1 : 0);
  dispatch("moe_route", {kGroup}, push, groups(rows, kGroup));
}

void Recorder::moeCombine(VkDeviceAddress src, VkDeviceAddress weights, VkDeviceAddress dst,
                          uint32_t rows, uint32_t cols, uint32_t used) {
  Push push;
  push.ref(src).ref(weights).ref(dst).u32(rows).u32(cols).u32(used);
  dispatch("moe_combine", {kGroup}, push, groups(uint64_t{rows} * cols, kGroup));
}

void Recorder::swigluOai(VkDeviceAddress gate, VkDeviceAddress up, uint32_t n) {
  Push push;
  push.ref(gate).ref(up).u32(n);
  dispatch("swiglu_oai", {kGroup}, push, groups(n, kGroup));
}

void Recorder::addExpertBias(VkDeviceAddress bias, VkDeviceAddress ids, VkDeviceAddress y,
                             uint32_t entries, uint32_t cols) {
  Push push;
  push.ref(bias).ref(ids).ref(y).u32(entries).u32(cols);
  dispatch("add_id", {kGroup}, push, groups(uint64_t{entries} * cols, kGroup));
}

void Recorder::geglu(VkDeviceAddress gate, VkDeviceAddress up, uint32_t n) {
  Push push;
  push.ref(gate).ref(up).u32(n);
  dispatch("geglu", {kGroup}, push, groups(n, kGroup));
}

void Recorder::scale(VkDeviceAddress x, uint32_t n, float factor) {
  Push push;
  push.ref(x).u32(n).f32(factor).u32(0);
  dispatch("scale", {kGroup}, push, groups(n, kGroup));
}

void Recorder::softcap(VkDeviceAddress x, uint32_t n, float cap) {
  Push push;
  push.ref(x).u32(n).f32(cap).u32(1);
  dispatch("scale", {kGroup}, push, groups(n, kGroup));
}

void Recorder::add(VkDeviceAddress x, VkDeviceAddress y, uint32_t n, uint32_t period) {
  Push push;
  push.ref(x).ref(y).u32(n).u32(period);
  dispatch("add", {kGroup}, push, groups(n, kGroup));
}

void Recorder::argmax(VkDeviceAddress logits, VkDeviceAddress tokens, uint32_t rows,
                      uint32_t vocab) {
  Push push;
  push.ref(logits).ref(tokens).u32(vocab);
  dispatch("argmax", {256}, push, rows);
}

}  // namespace shoal::vulkan
