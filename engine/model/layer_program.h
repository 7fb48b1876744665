#pragma once
// A transformer layer as a short program over named activation buffers, from a small closed set
// of ops. Each architecture (engine/model/arch/) writes its layers as such programs; backends
// implement the ops, not the architectures, and run a layer as a loop over its ops. Differences
// between layers of one model (an attention window, a RoPE base) are fields of the ops, not
// branches in a backend.
//
// Buffers hold one row per token of the batch; their widths follow from the model (ModelConfig):
//   X     nEmbd   the residual stream (input and output of the layer)
//   Norm  nEmbd   a normalized copy of X
//   Q     qDim    queries          K, V  kvDim   keys and values of the batch's tokens
//   Attn  qDim    attention output
//   Tmp   max(nEmbd, qDim)   a projection back to the residual width
//   Gate, Up  nFf  FFN hidden activations (MoeFfn keeps its per-expert activations itself)
//
// A backend may fuse a sequence of ops it recognises (e.g. Norm + Project) as long as the plain
// ops remain its fallback; the CPU backend runs the ops one by one in ggml's evaluation order,
// which keeps it bit-identical to llama.cpp.

#include <array>
#include <cstdint>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/tensor_table.h"

namespace shoal::model {

enum class Buffer : uint8_t { X, Norm, Q, K, V, Attn, Tmp, Gate, Up, Count };
constexpr size_t kBufferCount = static_cast<size_t>(Buffer::Count);

// The ops. Each reads and writes whole rows of the batch.
enum class OpKind : uint8_t {
  RmsNorm,         // dst = rmsnorm(src) * weight, per row of the buffer's width
  Project,         // outs[i].dst = weights[i] · src for each output (src quantized once)
  AddBias,         // dst += weight (a vector of dst's width), per row
  HeadNorm,        // dst = rmsnorm(dst) * weight per head: rows of headDim, `heads` heads per token
  Rope,            // rotate dst's `heads` heads by each token's position (rope parameters below)
  Attend,          // store K, V in the cache at the tokens' positions; Attn = attention(Q, cache)
  KeepOutputRows,  // the model's last layer only: from here on keep only the rows whose logits
                   // are wanted (llama.cpp's inp_out_ids); elsewhere a no-op
  Add,             // dst += src
  GatedFfn,        // Gate = act(weights[0] · src) * (weights[1] · src)   (Up is scratch)
  MoeFfn,          // dst = the routed experts' gated FFNs of src, weighted and summed (MoeParams)
  Scale,           // dst *= factor (gemma: the embedding by sqrt(nEmbd), the queries)
};

// How a gated FFN combines gate g and up u: SiLU (SwiGLU, g * sigmoid(g) * u), tanh-approximated
// GELU (GeGLU, gemma), or gpt-oss's clamped SwiGLU (ggml_swiglu_oai with llama.cpp's alpha 1.702
// and limit 7: g' = min(g, 7), u' = clamp(u, -7, 7), g' * sigmoid(1.702 g') * (u' + 1)).
enum class Activation : uint8_t { Silu, GeluTanh, SwigluOai };

// One output of a Project op.
// One output of a Project op: the weight's rows [firstRow, firstRow + rows) (rows 0: all of
// them), so one fused matrix (phi3's attn_qkv) can feed several buffers.
struct ProjectOut {
  TensorRole weight;
  Buffer dst;
  int32_t firstRow = 0;
  int32_t rows = 0;
};

struct RopeParams {
  int32_t nRot = 0;        // rotated dimensions of a head (the rest pass through)
  float freqBase = 10000;  // theta base
  float freqScale = 1;     // 1 / linear scaling factor
  RopeStyle style = RopeStyle::Normal;
  bool freqFactors = false;  // divide by rope_freqs.weight (TensorRole::RopeFreqs)
  // YaRN (ggml's rope_yarn): with extFactor 1 each pair's angle blends the interpolated
  // (freqScale) and the original one by a ramp between the correction dimensions that
  // betaFast/betaSlow give for nCtxOrig; cos and sin are scaled by attnFactor. extFactor 0 is
  // plain (linear) RoPE.
  float extFactor = 0;
  float attnFactor = 1;
  float betaFast = 32;
  float betaSlow = 1;
  int32_t nCtxOrig = 0;
  bool operator==(const RopeParams&) const = default;
};

struct AttendParams {
  int32_t window = 0;  // 0: every cached position; n: only the last n positions (sliding)
  float scale = 1;     // applied to Q·K before the softmax
  // Attention sinks (gpt-oss): each head's softmax also counts exp(sink - max) from the head's
  // value in TensorRole::AttnSinks, which attends to nothing (ggml_soft_max_add_sinks).
  bool sinks = false;
  // Soft-capping of Q·K (gemma2): cap * tanh(score / cap) before the scale; 0: none.
  float softcap = 0;
  bool operator==(const AttendParams&) const = default;
};

// How the router's logits become expert choices and weights (llama.cpp's gating functions).
//   Softmax:       p = softmax(logits); E = the top `used` by p; w_e = p_e (qwen3moe, Mixtral)
//   SoftmaxWeight: E = the top `used` by logit; w = softmax over E's logits (gpt-oss)
enum class MoeGating : uint8_t { Softmax, SoftmaxWeight };

// A mixture-of-experts FFN (llama.cpp's build_moe_ffn): per token,
//   logits = router · x (+ its bias); E and w as `gating` says, E most probable first;
//   w_e divided by the sum of the chosen w when normalizeWeights;
//   dst = sum over E, in that order, of w_e * (down_e · act(gate_e · x, up_e · x)), with each
//   expert's biases added to its gate, up and down products when `biases`.
// The weights are the roles GateInp (router), GateExps, UpExps and DownExps, and with `biases`
// GateInpBias, GateExpsBias, UpExpsBias and DownExpsBias; act is the op's `activation`.
struct MoeParams {
  int32_t experts = 0;  // experts in the layer
  int32_t used = 0;     // experts per token (top-k)
  bool normalizeWeights = true;
  MoeGating gating = MoeGating::Softmax;
  bool biases = false;
  bool operator==(const MoeParams&) const = default;
};

struct Op {
  OpKind kind = OpKind::RmsNorm;
  Buffer src = Buffer::X;
  Buffer dst = Buffer::X;
  TensorRole weight = TensorRole::Count;  // RmsNorm, AddBias, HeadNorm (Count: none)
  std::array<ProjectOut, 3> outs{};       // Project: the first `outCount` are used
  uint8_t outCount = 0;
  std::array<TensorRole, 2> ffn{};  // GatedFfn: gate, up
  // GatedFfn: ffn[0] is gate and up in one matrix, the gate's rows first (phi3's ffn_up).
  bool fusedGateUp = false;
  Activation activation = Activation::Silu;  // GatedFfn, MoeFfn
  int32_t heads = 0;                         // HeadNorm, Rope: heads per token in dst
  float eps = 0;                             // RmsNorm, HeadNorm
  float factor = 1;                          // Scale
  RopeParams rope{};                         // Rope
  AttendParams attend{};                     // Attend
  MoeParams moe{};                           // MoeFfn
};

struct LayerProgram {
  std::vector<Op> ops;
  int32_t kvDim = 0;  // width of this layer's cached keys (and values) per position
  // Positions this layer's KV cache keeps per sequence, if the program bounds it itself: 0 =
  // as the backends decide; n = only the last n. Today's architectures set 0 and the backends
  // refuse n > 0: a sliding-window Attend's cache is already the backends' ring
  // (kv_ring.h), which kv_footprint.h counts. Kept for programs that need another bound.
  int32_t window = 0;
};

// The sliding window a program's attention looks over: the widest Attend window (0: every
// Attend sees the whole context). Inline: the CUDA plugin uses it without linking the engine.
inline int32_t attendWindow(const LayerProgram& program) {
  int32_t window = 0;
  for (const Op& op : program.ops) {
    if (op.kind == OpKind::Attend && op.attend.window > window) window = op.attend.window;
  }
  return window;
}

// Builders, so arch files read like the math.
Op rmsNorm(Buffer src, Buffer dst, TensorRole weight, float eps);
Op project(Buffer src, std::initializer_list<ProjectOut> outs);
Op addBias(Buffer dst, TensorRole bias);
Op headNorm(Buffer dst, int32_t heads, TensorRole weight, float eps);
Op rope(Buffer dst, int32_t heads, const RopeParams& params);
Op attend(const AttendParams& params);
Op keepOutputRows();
Op add(Buffer src, Buffer dst);
Op gatedFfn(Buffer src, TensorRole gate, TensorRole up, Activation activation);
Op fusedGatedFfn(Buffer src, TensorRole gateUp, Activation activation);
Op moeFfn(Buffer src, Buffer dst, const MoeParams& params,
          Activation activation = Activation::Silu);
Op scale(Buffer dst, float factor);

}  // namespace shoal::model
