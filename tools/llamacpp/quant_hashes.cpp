// Prints, as JSON, the FNV-1a 64 hash of the bytes ggml's reference quantizer
// (ggml_type_traits::from_float_ref, i.e. quantize_row_<type>_ref) writes for the row
// test_gguf_quantize quantizes (quantizer_test_row.h, shared with it). That test compares
// Shoal's quantizers with these hashes. Built and run against the pinned llama.cpp's ggml by
// quant_hashes.sh.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ggml.h"
#include "tests/unit/gguf/quantizer_test_row.h"

// ggml-quants.h (internal to ggml) declares it; Q8_K is an activation type, so its traits leave
// from_float_ref empty.
extern "C" void quantize_row_q8_K_ref(const float* x, void* y, int64_t k);

int main() {
  // Every type the test checks; ggml's names are the JSON keys.
  const ggml_type types[] = {GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0,   GGML_TYPE_Q4_1,
                             GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,   GGML_TYPE_Q8_1,
                             GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K,   GGML_TYPE_Q5_K,
                             GGML_TYPE_Q6_K, GGML_TYPE_Q8_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
                             GGML_TYPE_MXFP4};
  using shoal::quant_test::fnv1a;
  constexpr int64_t kN = shoal::quant_test::kRowLength;
  const std::vector<float> x = shoal::quant_test::testRow();
  std::printf("{\n");
  bool first = true;
  for (ggml_type t : types) {
    const ggml_type_traits* traits = ggml_get_type_traits(t);
    const ggml_from_float_t quantize =
        t == GGML_TYPE_Q8_K ? quantize_row_q8_K_ref : traits->from_float_ref;
    if (quantize == nullptr) {
      std::fprintf(stderr, "quant_hashes: ggml has no reference quantizer for %s\n",
                   traits->type_name);
      return 1;
    }
    // Zero-filled: for an all-zero block ggml's Q8_K leaves the 16 block sums unwritten, where
    // Shoal writes their true value, 0. Every other type writes every byte.
    std::vector<uint8_t> out(ggml_row_size(t, kN), 0);
    quantize(x.data(), out.data(), kN);
    // An all-zero IQ4_NL block gets scale 0 and, from ggml, the previous block's levels (stale
    // in its level buffer; undefined for a row's first block). Shoal writes 0 there: zero them.
    if (t == GGML_TYPE_IQ4_NL) {
      for (int64_t blk = 0; blk < kN / 32; ++blk) {
        bool zero = true;
        for (int j = 0; j < 32; ++j) zero = zero && std::fabs(x[blk * 32 + j]) < 1e-15f;
        if (zero) std::fill_n(out.begin() + blk * 18 + 2, 16, uint8_t{0});
      }
    }
    std::printf("%s  \"%s\": \"0x%016llx\"", first ? "" : ",\n", traits->type_name,
                static_cast<unsigned long long>(fnv1a(out)));
    first = false;
  }
  std::printf("\n}\n");
  return 0;
}
