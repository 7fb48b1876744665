// exact.glsl's rounding helpers for devices without shaderFloat64 (the "_native" shader variants,
// SHOAL_NATIVE_MATH), in float arithmetic only. Error-free transformations recover what a
// rounding loses: TwoSum (Knuth) gives the exact error of a sum, TwoProduct with Veltkamp
// splitting (Dekker 1971) the exact error of a product without relying on a fused multiply-add,
// which drivers may or may not provide. `precise` keeps the compiler from fusing or reassociating
// them. From those: a fused multiply-add, division and square root that round as the correctly
// rounded operations except in rare near-midpoint cases, and a float-float accumulator (about 48
// significant bits) in place of exact.glsl's double sums. So this path agrees with the CPU
// backend almost always bit for bit, and otherwise to an ulp.

// s + e == a + b exactly.
void twoSum(float a, float b, out float s, out float e) {
  precise float ss = a + b;
  precise float bv = ss - a;
  precise float ee = (a - (ss - bv)) + (b - bv);
  s = ss;
  e = ee;
}

// hi + lo == a, each with at most 12 significant bits (4097 = 2^12 + 1).
void veltkampSplit(float a, out float hi, out float lo) {
  precise float c = 4097.0 * a;
  precise float h = c - (c - a);
  precise float l = a - h;
  hi = h;
  lo = l;
}

// p + e == a * b exactly (barring overflow).
void twoProduct(float a, float b, out float p, out float e) {
  precise float pp = a * b;
  float ah, al, bh, bl;
  veltkampSplit(a, ah, al);
  veltkampSplit(b, bh, bl);
  precise float ee = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
  p = pp;
  e = ee;
}

float fmaExact(float a, float b, float c) {
  float p, e, s, t;
  twoProduct(a, b, p, e);
  if (isinf(p) || isnan(p)) return p + c;
  twoSum(p, c, s, t);
  precise float r = s + (t + e);
  return r;
}

// The driver's quotient (possibly a few ulp off), corrected by its exact residual a - q*b.
float divExact(float a, float b) {
  precise float q = a / b;
  if (q == 0.0 || isinf(q) || isnan(q)) return q;
  float p, e;
  twoProduct(q, b, p, e);
  precise float r = (a - p) - e;
  precise float corrected = q + r / b;
  return corrected;
}

float sqrtExact(float a) {
  precise float s = sqrt(a);
  if (!(s > 0.0) || isinf(s)) return s;
  float p, e;
  twoProduct(s, s, p, e);
  precise float r = (a - p) - e;
  precise float corrected = s + r / (2.0 * s);
  return corrected;
}

// The accumulator exact.glsl keeps in double: an unevaluated sum hi + lo, renormalized after
// each addition so |lo| <= ulp(hi) / 2.
struct Acc {
  float hi;
  float lo;
};
Acc accFrom(float x) { return Acc(x, 0.0); }
Acc accAdd(Acc a, float x) {
  float s, t, hi, lo;
  twoSum(a.hi, x, s, t);
  precise float l = a.lo + t;
  twoSum(s, l, hi, lo);
  return Acc(hi, lo);
}
float accToFloat(Acc a) {
  precise float v = a.hi + a.lo;
  return v;
}
// (hi + lo) / n rounded to float.
float accDivToFloat(Acc a, float n) {
  precise float q = a.hi / n;
  float p, e;
  twoProduct(q, n, p, e);
  precise float r = ((a.hi - p) - e) + a.lo;
  precise float corrected = q + r / n;
  return corrected;
}
// 1 / (hi + lo) rounded to float.
float accRecipToFloat(Acc a) {
  precise float q = 1.0 / a.hi;
  if (isinf(q) || isnan(q)) return q;
  float p, e;
  twoProduct(q, a.hi, p, e);
  precise float r = ((1.0 - p) - e) - q * a.lo;
  precise float corrected = q + q * r;
  return corrected;
}
