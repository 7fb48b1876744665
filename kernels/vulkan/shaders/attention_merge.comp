#version 450
// The last step of split attention (attention_split.comp): one workgroup per (head, token)
// combines the splits' unnormalized outputs o_s, maxima m_s and sums l_s into
//   y = sum_s o_s exp(m_s - M) / (sum_s l_s exp(m_s - M) + exp(sink - M)),
// M the largest m_s (and the sink's logit, when the model has sinks). Splits that covered no
// position have m_s = -inf and weigh nothing.
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats parts;  // (token, head, split) x headDim
  Floats ml;     // (m, l) per (token, head, split)
  Floats y;      // tokens x heads x headDim
  Floats sinks;  // one logit per head, when hasSinks
  uint heads;
  uint headDim;
  uint splits;
  uint hasSinks;
} p;

const float NEG_INF = -1.0 / 0.0;

void main() {
  const uint head = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint row = t * p.heads + head, first = row * p.splits;
  float mAll = p.hasSinks != 0u ? p.sinks.v[head] : NEG_INF;
  for (uint s = 0; s < p.splits; ++s) mAll = max(mAll, p.ml.v[(first + s) * 2u]);
  float l = p.hasSinks != 0u ? exp(p.sinks.v[head] - mAll) : 0.0;
  for (uint s = 0; s < p.splits; ++s) {
    const float ms = p.ml.v[(first + s) * 2u];
    if (ms != NEG_INF) l += p.ml.v[(first + s) * 2u + 1u] * exp(ms - mAll);
  }
  const float inv = 1.0 / l;
  for (uint d = tid; d < p.headDim; d += gl_WorkGroupSize.x) {
    float acc = 0.0;
    for (uint s = 0; s < p.splits; ++s) {
      const float ms = p.ml.v[(first + s) * 2u];
      if (ms != NEG_INF) acc += p.parts.v[(first + s) * p.headDim + d] * exp(ms - mAll);
    }
    p.y.v[row * p.headDim + d] = acc * inv;
  }
}
