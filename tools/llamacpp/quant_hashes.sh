#!/usr/bin/env bash
# Prints the FNV-1a hashes of the bytes ggml's reference quantizers write for
# test_gguf_quantize's input (quant_hashes.cpp), from the pinned llama.cpp that
# build_llama_bench.sh builds: the numbers that test's bytesMatchGgmlReference compares with.
#
#   tools/llamacpp/quant_hashes.sh      # JSON on stdout, {"q4_0": "0x...", ...}
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$("$here/build_llama_bench.sh")"  # .../build/bin; ggml's static libraries are beside it
build="$(dirname "$bin")"
src="$(dirname "$build")/src/vendor/llama.cpp/ggml"
lib="$build/ggml/src/libggml-base.a"
[[ -f "$lib" ]] || { printf 'quant_hashes: no %s\n' "$lib" >&2; exit 1; }

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# -fopenmp: ggml-quants.c's IQ2/IQ3 grid set-up uses OpenMP (linked, not called here).
"${CXX:-c++}" -std=c++17 -O1 -I"$src/include" -I"$here/../.." "$here/quant_hashes.cpp" "$lib" -fopenmp -lm \
    -lpthread -o "$out/quant_hashes"
"$out/quant_hashes"
