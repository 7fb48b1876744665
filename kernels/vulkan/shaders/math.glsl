// The arithmetic of the kernels that round floats (norms, RoPE, attention, the quantizer,
// activations), in one of two modes chosen per shader variant at build time:
//
//  * native (the default variant of every shader): the device's own fma, division and square
//    root, sums in float. Fast on every GPU; the results differ from the CPU backend's by
//    rounding, which the GPU accuracy contract bounds (per op NMSE <= 5e-4, 1e-6 for float ops;
//    end to end mean KL <= 0.01 nats and top-1 agreement >= 99% at decisive positions:
//    docs/ARCHITECTURE.md).
//  * exact (SHOAL_EXACT_MATH, the "<name>_exact" variants, opt-in with SHOAL_VULKAN_MATH=exact on
//    a device with shaderFloat64): fma, division and square root rounded exactly as the CPU
//    backend does (kernels/cpu/ggml_order.h), whatever the driver does with plain GLSL (Vulkan
//    lets fma() be a multiply and an add rounded twice, as Mesa's llvmpipe lowers it, and lets
//    division go through a reciprocal). A debugging tool: with it lavapipe reproduces the CPU
//    bit for bit. Consumer GPUs run fp64 at 1/32-1/64 of fp32, so it is never a default.
//
// Kernels write mathFma, mathDiv, mathSqrt and the Acc accumulator, and read the same in both
// modes; no default variant declares the Float64 capability (test_vulkan_spirv checks).

#ifdef SHOAL_EXACT_MATH
// fma(a, b, c) rounded once. The product of two floats is exact in double, so only the sum is
// rounded twice (to double, then to float). That double rounding can differ from one rounding
// only when the double result lands exactly on a midpoint between two floats (its low 29
// mantissa bits 1000...0); then the sum's rounding error is recovered (TwoSum) and, if the sum
// was inexact, the double is moved one ulp towards the exact value, off the midpoint.
// (Subnormal float results are not handled: drivers may flush them anyway.)
float mathFma(float a, float b, float c) {
  precise double p = double(a) * double(b);
  precise double dc = double(c);
  precise double s = p + dc;
  uvec2 w = unpackDouble2x32(s);
  if ((w.x & 0x1fffffffu) == 0x10000000u) {
    precise double bv = s - p;
    precise double e = (p - (s - bv)) + (dc - bv);
    if (e != 0.0) {
      // w.x is even here: the step never carries or borrows across the 32-bit halves.
      w.x = (s > 0.0) == (e > 0.0) ? w.x + 1u : w.x - 1u;
      s = packDouble2x32(w);
    }
  }
  return float(s);
}

// a / b and sqrt(a) correctly rounded: the double result rounded to float is the correctly
// rounded float result (double rounding is innocuous for division and square root).
float mathDiv(float a, float b) {
  precise double q = double(a) / double(b);
  return float(q);
}
float mathSqrt(float a) {
  precise double r = sqrt(double(a));
  return float(r);
}

// A running sum kept in double (rms_norm's sum of squares, attention's softmax denominator):
// float terms added exactly in double order, as the CPU backend's ggml_float sums.
struct Acc {
  double v;
};
Acc accFrom(float x) { return Acc(double(x)); }
Acc accAdd(Acc a, float x) {
  precise double s = a.v + double(x);
  return Acc(s);
}
float accToFloat(Acc a) { return float(a.v); }
// The double quotient rounded to float (double rounding is innocuous for division).
float accDivToFloat(Acc a, float n) {
  precise double q = a.v / double(n);
  return float(q);
}
float accRecipToFloat(Acc a) {
  precise double q = 1.0 / a.v;
  return float(q);
}
#else
float mathFma(float a, float b, float c) { return fma(a, b, c); }
float mathDiv(float a, float b) { return a / b; }
float mathSqrt(float a) { return sqrt(a); }

// A running sum in float (attention's softmax denominator, still summed by one invocation;
// native RMSNorm does not use it: it sums in a tree across the workgroup).
struct Acc {
  float v;
};
Acc accFrom(float x) { return Acc(x); }
Acc accAdd(Acc a, float x) { return Acc(a.v + x); }
float accToFloat(Acc a) { return a.v; }
float accDivToFloat(Acc a, float n) { return a.v / n; }
float accRecipToFloat(Acc a) { return 1.0 / a.v; }
#endif  // SHOAL_EXACT_MATH

// f16 bits of x rounded to nearest even (engine/gguf floatToHalf: NaN -> quiet NaN, overflow
// -> infinity, subnormal halves in units of 2^-24).
uint halfBits(float f) {
  uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;
  if (x >= 0x477ff000u) return sign | 0x7c00u;
  if (x < 0x38800000u) {
    const uint e = x >> 23;
    const uint shift = 126u - e;
    if (shift > 24u) return sign;
    const uint mant = (x & 0x7fffffu) | 0x800000u;
    uint q = mant >> shift;
    const uint rem = mant & ((1u << shift) - 1u);
    const uint halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u) != 0u)) ++q;
    return sign | q;
  }
  const uint rebased = x - (112u << 23);
  uint h = rebased >> 13;
  const uint rem = rebased & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) ++h;
  return sign | h;
}
float halfValue(uint h) { return unpackHalf2x16(h).x; }
// x rounded to f16 and back.
float roundHalf(float x) { return halfValue(halfBits(x)); }

// ggml's hsum_float_8 and _mm512_reduce_add_ps orders (ggml_order.h hsum8, reduce16).
float hsum8(float a[8]) {
  precise float v0 = a[4] + a[0], v1 = a[5] + a[1], v2 = a[6] + a[2], v3 = a[7] + a[3];
  precise float r = (v0 + v2) + (v1 + v3);
  return r;
}
float reduce16(float a[16]) {
  float u[8];
  for (int i = 0; i < 8; ++i) {
    precise float s = a[i + 8] + a[i];
    u[i] = s;
  }
  return hsum8(u);
}

// ggml_v_expf, AVX-512 variant (ggml_order.h exp): same constants, same fused steps.
float expGgml(float x) {
  const float r = 12582912.0;  // 0x1.8p23
  precise float z = mathFma(x, uintBitsToFloat(0x3fb8aa3bu), r);  // log2(e) 0x1.715476p+0
  precise float n = z - r;
  if (abs(n) > 192.0) return n <= 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
  precise float b = mathFma(-n, uintBitsToFloat(0x35bfbe8eu),  // 0x1.7f7d1cp-20
                             mathFma(-n, uintBitsToFloat(0x3f317200u), x));  // 0x1.62e4p-1
  precise float u = b * b;
  precise float j = mathFma(
      mathFma(mathFma(uintBitsToFloat(0x3c072010u), b, uintBitsToFloat(0x3d2b9f17u)), u,
               mathFma(uintBitsToFloat(0x3e2aaf33u), b, uintBitsToFloat(0x3efffedbu))),
      u, mathFma(uintBitsToFloat(0x3f7ffff6u), b, 1.0));
  // _mm512_scalef_ps: j * 2^n, one rounding.
  return ldexp(j, int(n));
}

// ggml_v_silu: x / (1 + exp(0 - x)).
float siluGgml(float x) {
  precise float den = 1.0 + expGgml(0.0 - x);
  return mathDiv(x, den);
}
