#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-completion (the classic command-line generator) and
# llama-server (its OpenAI-compatible server with continuous batching) from the llama.cpp
# vendored in the pinned llama-cpp-python sdist, i.e. the same llama.cpp the fixtures come from,
# and prints the directory holding the binaries. Benchmarks use llama-bench as the speed peer on
# the same model and thread count, and llama-server as bench/serve.py's peer.
#
#   SHOAL_LLAMACPP_DIR    where to build (default: $HOME/.cache/shoal/llama.cpp-0.3.36)
#   SHOAL_LLAMACPP_JOBS   parallel compile jobs (default: nproc)
#   SHOAL_LLAMACPP_LEVEL  native (default: -march=native, as a user building it locally gets) or
#                         avx2 (x86-64: AVX2, FMA, F16C and BMI2 only, in build-avx2/): the peer
#                         of Shoal's AVX2 level (SHOAL_CPU_ISA=avx2) on an AVX-512 machine, i.e.
#                         what an AVX2-only CPU (Zen 2/3, Intel client cores) runs
#
# Idempotent: once the binaries exist (stamp file), it only prints the path. Network is needed
# for the first run (pip download of the sdist).
#
# Note for AMX CPUs: this llama.cpp segfaults in its AMX Q4_1 matmul (llama.cpp issue #20824);
# pass `--repack 0` to llama-bench there (no AMX / repacked weight buffers).
set -euo pipefail

readonly kVersion="0.3.36"
readonly kTargets=(llama-bench llama-completion llama-server)
dir="${SHOAL_LLAMACPP_DIR:-$HOME/.cache/shoal/llama.cpp-$kVersion}"
level="${SHOAL_LLAMACPP_LEVEL:-native}"
case "$level" in
    native) build="$dir/build"; stamp="$dir/.built-$kVersion"; isa_flags=(-DGGML_NATIVE=ON) ;;
    # Static build: ggml compiles these flags in (no run-time choice of CPU variant).
    avx2) build="$dir/build-avx2"; stamp="$build/.built-$kVersion"
          isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
                     -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF) ;;
    *) printf 'build_llama_bench: SHOAL_LLAMACPP_LEVEL must be native or avx2, got %s\n' "$level" >&2
       exit 2 ;;
esac
bin="$build/bin"

log() { printf 'build_llama_bench: %s\n' "$*" >&2; }

if [[ -f "$stamp" && -x "$bin/llama-bench" && -x "$bin/llama-server" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$dir"
src="$dir/src"
if [[ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]]; then
    tmp="$(mktemp -d "$dir/download.XXXXXX")"
    # shellcheck disable=SC2064  # expand $tmp now
    trap "rm -rf '$tmp'" EXIT
    log "downloading llama-cpp-python==$kVersion sdist"
    python3 -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
        "llama-cpp-python==$kVersion" -d "$tmp"
    sdist="$(find "$tmp" -maxdepth 1 -name "llama_cpp_python-$kVersion.tar.gz" -print -quit)"
    [[ -n "$sdist" ]] || { log "pip download produced no llama_cpp_python-$kVersion.tar.gz"; exit 1; }
    rm -rf "$src"
    mkdir -p "$tmp/x"
    tar -xzf "$sdist" -C "$tmp/x"
    mv "$tmp/x/llama_cpp_python-$kVersion" "$src"
fi

# GGML_NATIVE (the default level): compile for this CPU, as a user building llama.cpp locally
# would. The sdist keeps the llama.cpp submodule's git metadata, so build-info records its commit.
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
log "configuring llama.cpp ($level) in $build"
cmake -S "$src/vendor/llama.cpp" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    "${isa_flags[@]}" \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON >&2
log "building ${kTargets[*]}"
cmake --build "$build" --target "${kTargets[@]}" -j "${SHOAL_LLAMACPP_JOBS:-$(nproc)}" >&2

"$bin/llama-bench" --help >/dev/null
"$bin/llama-server" --help >/dev/null
touch "$stamp"
echo "$bin"
