#version 450
// gate[i] = gelu(gate[i]) * up[i] over n elements, GELU as the CPU backend computes it
// (kernels/cpu/geglu.cpp, ggml's GGML_GELU_FP16 path): 0 below -10, the identity above 10, and
// in between ggml's tanh form evaluated on the value rounded to f16 and rounded to f16 again
// (ggml_table_gelu_f16). tanh is the driver's, so a result can differ from the CPU's table
// entry by one f16 step.
#include "common.glsl"
#include "math.glsl"

layout(push_constant) uniform Push {
  Floats gate;
  Floats up;
  uint n;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.n) return;
  const float x = p.gate.v[i];
  float g;
  if (x <= -10.0) {
    g = 0.0;
  } else if (x >= 10.0) {
    g = x;
  } else {
    const float h = roundHalf(x);
    const float inner = mathFma(0.044715 * h, h, 1.0);
    precise float arg = 0.79788456080286535587989211986876 * h * inner;
    precise float gelu = 0.5 * h * (1.0 + tanh(arg));
    g = roundHalf(gelu);
  }
  precise float y = g * p.up.v[i];
  p.gate.v[i] = y;
}
