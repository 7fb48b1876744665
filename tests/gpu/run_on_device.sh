#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in one call (target: under 8 minutes on an H200):
# configure an engine-only build for sm_90, build the GPU targets, then
#   1. gpu_ops_test      every kernel vs a CPU reference (normalized MSE <= 5e-4)
#   2. gpu_model_check   greedy 64 tokens, CUDA stage == CPU stage, on the default model
#   3. gpu_bench         decode tok/s, pp512 tok/s, fraction of 4.8 TB/s: default model and a
#                        synthetic Llama-3-8B-shaped Q4_0 model written here by the project's writer
#
# Usage (from the repository root): tests/gpu/run_on_device.sh [MODEL.gguf]
#   MODEL defaults to models/SmolLM2-135M-Instruct.Q4_1.gguf (git-ignored: carry models/).
# Environment: BUILD_DIR (default build-gpu), JOBS (default 16), SKIP_8B=1 to skip the 8B bench,
#   SHOAL_DEPS: a prefix with extra CMake packages (e.g. nlohmann_json) if the machine lacks them.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODEL="${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
JOBS="${JOBS:-16}"
start=$(date +%s)
status=0
step() { echo; echo "=== $* ($(( $(date +%s) - start )) s)"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
"$NVCC" --version | tail -1 || { echo "FAIL no nvcc"; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
prefix=()
[[ -n "${SHOAL_DEPS:-}" ]] && prefix=(-DCMAKE_PREFIX_PATH="$(realpath "$SHOAL_DEPS")")

step "configure (engine only, CUDA sm_90)"
cmake -S . -B "$BUILD_DIR" "${generator[@]}" "${prefix[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DSHOAL_ENGINE_ONLY=ON -DSHOAL_CUDA=ON -DSHOAL_CUDA_ARCHS=90 -DSHOAL_GUI=OFF \
  -DSHOAL_VULKAN=OFF -DCMAKE_CUDA_COMPILER="$NVCC" || { echo "FAIL configure"; exit 1; }

step "build"
cmake --build "$BUILD_DIR" --target shoal_gpu_checks -j "$JOBS" || { echo "FAIL build"; exit 1; }
export SHOAL_CUDA_PLUGIN="$PWD/$BUILD_DIR/kernels/cuda/libshoal-cuda.so"
bin="$BUILD_DIR/tests/gpu"

step "1. kernel ops vs CPU"
timeout 120 "$bin/gpu_ops_test" || status=1

if [[ -f "$MODEL" ]]; then
  step "2. greedy 64 tokens, CUDA vs CPU ($MODEL)"
  timeout 180 "$bin/gpu_model_check" "$MODEL" || status=1
  step "3a. bench $MODEL"
  timeout 120 "$bin/gpu_bench" "$MODEL" || status=1
else
  echo "FAIL model $MODEL not found (carry models/ or pass a path): steps 2 and 3a skipped"
  status=1
fi

if [[ "${SKIP_8B:-0}" != 1 ]]; then
  step "3b. bench synthetic Llama-3-8B-shaped Q4_0 (written now)"
  synth="$BUILD_DIR/synthetic-llama3-8b-q4_0.gguf"
  if [[ -f "$synth" ]]; then
    timeout 240 "$bin/gpu_bench" "$synth" || status=1
  else
    timeout 300 "$bin/gpu_bench" --write-8b "$synth" || status=1
  fi
fi

step "done, status $status"
exit $status
