#pragma once
// The scalar reference kernels (the Isa::Scalar table), exposed one by one so that the SIMD
// levels can reuse them where a SIMD version would not pay (e.g. the Q8_K quantizer) and tests
// can call them directly.

#include <cstdint>

#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu::ref {

// Dot of one weight row (file format) with one converted activation row, n elements.
float dotF32(const void* w, const void* a, int64_t n, DotOrder order);
float dotF16(const void* w, const void* a, int64_t n, DotOrder order);
float dotBF16(const void* w, const void* a, int64_t n, DotOrder order);
float dotQ4_0(const void* w, const void* a, int64_t n, DotOrder order);
float dotIQ4_NL(const void* w, const void* a, int64_t n, DotOrder order);
float dotMXFP4(const void* w, const void* a, int64_t n, DotOrder order);
float dotQ2_K(const void* w, const void* a, int64_t n, DotOrder order);
float dotQ3_K(const void* w, const void* a, int64_t n, DotOrder order);
float dotIQ4_XS(const void* w, const void* a, int64_t n, DotOrder order);
float dotQ4_1(const void* w, const void* a, int64_t n);
float dotQ5_0(const void* w, const void* a, int64_t n);
float dotQ5_1(const void* w, const void* a, int64_t n);
float dotQ8_0(const void* w, const void* a, int64_t n);
float dotQ4_K(const void* w, const void* a, int64_t n, DotOrder order);
float dotQ5_K(const void* w, const void* a, int64_t n, DotOrder order);
float dotQ6_K(const void* w, const void* a, int64_t n, DotOrder order);

// The dot of a weight kind with its activation format.
float dot(WeightKind kind, const void* w, const void* a, int64_t n, DotOrder order);

// Activation converters.
void convertF32(const float* x, void* dst, int64_t n);
void convertF16(const float* x, void* dst, int64_t n);
void convertBF16(const float* x, void* dst, int64_t n);
void quantizeQ8_0(const float* x, void* dst, int64_t n);
void quantizeQ8_1(const float* x, void* dst, int64_t n);
void quantizeQ8_K(const float* x, void* dst, int64_t n);

void halfToFloat(const uint16_t* x, float* y, int64_t n);
void floatToHalf(const float* x, uint16_t* y, int64_t n);
float dotHalf(const uint16_t* x, const uint16_t* y, int64_t n, DotOrder order);
double softmaxExp(const float* x, float max, float* y, int64_t n);
void swiglu(const float* gate, const float* up, float* y, int64_t n);

}  // namespace shoal::cpu::ref
