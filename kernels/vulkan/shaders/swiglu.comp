#version 450
// gate[i] = silu(gate[i]) * up[i] over rows of rowLen, rounded as the CPU backend's swiglu
// (ggml_vec_swiglu_f32): ggml's vectorized exp on whole groups of 16 of a row. The last
// rowLen % 16 elements of a row go through libm's expf on the CPU, which this kernel cannot
// reproduce bit for bit (it uses the driver's exp there); rows of the models Shoal runs are
// multiples of 16.
#include "common.glsl"
#include "math.glsl"

layout(push_constant) uniform Push {
  Floats gate;
  Floats up;
  uint n;
  uint rowLen;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.n) return;
  const float g = p.gate.v[i];
  float s;
  if (i % p.rowLen < p.rowLen - p.rowLen % 16u) {
    s = siluGgml(g);
  } else {
    precise float den = 1.0 + exp(-g);
    s = mathDiv(g, den);
  }
  precise float y = s * p.up.v[i];
  p.gate.v[i] = y;
}
