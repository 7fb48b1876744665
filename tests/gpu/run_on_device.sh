#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in one call (target: under 8 minutes on an H200),
# with nothing there but the CUDA toolkit, CMake, ninja and Python (no Qt, Asio or Debian -dev
# packages: the engine-only build needs none of them):
#   configure   engine-only build, CUDA for the GPU's own architecture (nvidia-smi compute_cap)
#   1. ops      gpu_ops_test: every kernel against a CPU reference (normalized MSE <= 5e-4)
#   2. model    gpu_model_check: teacher-forced mean KL <= 0.01 nats and top-1 >= 99% (decisive
#               positions: logit_agreement.h) against the CPU backend on the fixture prompts,
#               with SmolLM2's first 4 layers (real tokenizer and weights, ~39 MB:
#               tests/gpu/prepare_carry.sh writes it here)
#   2b. archs   gpu_model_check the same way on small synthetic models of every architecture
#               and weight type (gpu_arch_models writes them there)
#   3. bench    gpu_bench on that model and on a synthetic Llama-3-8B-shaped Q4_0 model that the
#               project's writer produces there (decode, pp512, fraction of HBM bandwidth)
# Every step's JSON line is collected into gpu-report.json (in $OUT when set, else the build dir).
#
# Usage, from the repository root:
#   tests/gpu/prepare_carry.sh                 here, once: writes models/gpu/ (carry that path)
#   tests/gpu/run_on_device.sh                 on the GPU machine
#   tests/gpu/run_on_device.sh --dry-run       here: everything but the GPU (see below)
#
# --dry-run rehearses the script on a machine without an NVIDIA GPU: the same configure and build
# (plus the Vulkan backend where its SDK is installed), the CUDA steps must each print a clean
# SKIP, then steps 2 and 3 run for real with --backend vulkan (lavapipe here) on fewer prompts, so
# the harness, the JSON and the models are exercised end to end; the 8B model is written only
# with DRY_RUN_8B=1 (4.5 GB).
#
# Environment: BUILD_DIR (default build-gpu), JOBS (default: nproc), SKIP_8B=1 to skip the 8B
# model, SHOAL_CUDA_ARCHS to override the architecture, ACCURACY_MODEL to use another model.
set -uo pipefail
cd "$(dirname "$0")/../.."
dryRun=0
[[ "${1:-}" == --dry-run ]] && dryRun=1
BUILD_DIR="${BUILD_DIR:-build-gpu}"
JOBS="${JOBS:-$(nproc)}"
ACCURACY_MODEL="${ACCURACY_MODEL:-models/gpu/smollm2-first4.gguf}"
PROMPTS=models/gpu/fixture_prompts.bin
start=$(date +%s)
status=0
reportLines=()
step() { echo; echo "=== $* ($(($(date +%s) - start)) s)"; }
fail() { echo "FAIL $*"; status=1; }
# run NAME TIMEOUT COMMAND...: runs it, echoes its output, keeps its JSON lines for the report.
run() {
  local name="$1" limit="$2" rc=0 out
  shift 2
  out="$(timeout "$limit" "$@" 2>&1)" || rc=$?
  printf '%s\n' "$out"
  while IFS= read -r line; do
    [[ "$line" == "{"* ]] && reportLines+=("{\"step\": \"$name\", \"result\": $line}")
  done <<<"$out"
  [[ $rc == 0 ]] || fail "$name exited $rc"
  # In a dry run the CUDA steps must skip, and say so, rather than pass by doing nothing.
  if [[ $dryRun == 1 && "$name" == cuda-* ]] && ! grep -q -E '^SKIP |"skipped"' <<<"$out"; then
    fail "$name did not report a clean skip without a GPU"
  fi
  return 0
}

step "machine"
gpuName=""
computeCap=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 | head -3
  gpuName="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  computeCap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)"
elif [[ $dryRun == 0 ]]; then
  fail "no nvidia-smi: not a GPU machine (use --dry-run to rehearse)"
fi
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
"$NVCC" --version | tail -1 || { echo "FAIL no nvcc"; exit 1; }
cmake --version | head -1
arch="${SHOAL_CUDA_ARCHS:-}"
[[ -z "$arch" && "$computeCap" =~ ^([0-9]+)\.([0-9]+)$ ]] && arch="${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
arch="${arch:-90}"
# The H200's HBM3e peak; other GPUs report only the fraction of their measured copy bandwidth.
peak=()
[[ "$gpuName" == *H200* ]] && peak=(--peak-Bps 4.8e12)

step "configure (engine only, CUDA sm_$arch)"
mkdir -p "$BUILD_DIR"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
vulkan=OFF
[[ $dryRun == 1 ]] && command -v glslc >/dev/null && vulkan=ON
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DSHOAL_ENGINE_ONLY=ON -DSHOAL_CUDA=ON "-DSHOAL_CUDA_ARCHS=$arch" -DSHOAL_GUI=OFF \
  "-DSHOAL_VULKAN=$vulkan" -DCMAKE_CUDA_COMPILER="$NVCC" >"$BUILD_DIR/configure.log" 2>&1 ||
  { tail -30 "$BUILD_DIR/configure.log"; echo "FAIL configure"; exit 1; }
grep -E "CUDA backend|Vulkan backend" "$BUILD_DIR/configure.log"

step "build"
cmake --build "$BUILD_DIR" --target shoal_gpu_checks -j "$JOBS" >"$BUILD_DIR/build.log" 2>&1 ||
  { tail -40 "$BUILD_DIR/build.log"; echo "FAIL build"; exit 1; }
tail -1 "$BUILD_DIR/build.log"
export SHOAL_CUDA_PLUGIN="$PWD/$BUILD_DIR/kernels/cuda/libshoal-cuda.so"
bin="$BUILD_DIR/tests/gpu"

step "1. kernel ops vs CPU"
run cuda-ops 120 "$bin/gpu_ops_test"

mkdir -p models/gpu
if [[ ! -f "$PROMPTS" ]]; then
  python3 tests/gpu/fixture_prompts.py "$PROMPTS" || fail "fixture prompts"
fi
if [[ ! -f "$ACCURACY_MODEL" ]]; then
  fail "model $ACCURACY_MODEL not found: run tests/gpu/prepare_carry.sh and carry models/gpu"
else
  step "2. teacher-forced accuracy vs CPU ($ACCURACY_MODEL)"
  run cuda-model 240 "$bin/gpu_model_check" --backend cuda --prompts "$PROMPTS" "$ACCURACY_MODEL"
  # Without the fused decode launches (matvecSet, matvecGated): tells a fused kernel's fault
  # from the rest's.
  run cuda-model-unfused 240 env SHOAL_CUDA_UNFUSED=1 "$bin/gpu_model_check" --backend cuda \
    --prompts "$PROMPTS" --max-prompts 4 "$ACCURACY_MODEL"
  step "3a. bench $ACCURACY_MODEL"
  run cuda-bench-small 120 "$bin/gpu_bench" --backend cuda "${peak[@]}" "$ACCURACY_MODEL"
  if [[ $dryRun == 1 && $vulkan == ON ]]; then
    step "dry run: steps 2 and 3a on the Vulkan backend"
    run vulkan-model 600 "$bin/gpu_model_check" --backend vulkan --prompts "$PROMPTS" \
      --max-prompts 2 --steps 8 "$ACCURACY_MODEL"
    run vulkan-bench-small 600 "$bin/gpu_bench" --backend vulkan "$ACCURACY_MODEL"
  fi
fi

# Every architecture and weight type on small synthetic models the GPU machine writes itself
# (gpu_arch_models: the parity fixtures' shapes): experts, sliding windows over a ring (the
# 2048-position context makes their caches rings), soft-capping, sinks, fused projections and
# the K-quant, IQ4 and MXFP4 types, each against the CPU backend.
step "2b. architectures and weight types vs CPU (synthetic)"
archBackends=(cuda)
[[ $dryRun == 1 && $vulkan == ON ]] && archBackends+=(vulkan)
if archModels="$(timeout 120 "$bin/gpu_arch_models" "$BUILD_DIR/arch-models")"; then
  for model in $archModels; do
    for backend in "${archBackends[@]}"; do
      run "$backend-arch-$(basename "$model" .gguf)" 120 "$bin/gpu_model_check" --backend "$backend" \
        --prompts "$PROMPTS" --max-prompts 3 --steps 16 --context 2048 "$model"
    done
  done
else
  fail "writing the synthetic architecture models"
fi

if [[ "${SKIP_8B:-0}" != 1 && ($dryRun == 0 || "${DRY_RUN_8B:-0}" == 1) ]]; then
  step "3b. bench synthetic Llama-3-8B-shaped Q4_0"
  synth="$BUILD_DIR/synthetic-llama3-8b-q4_0.gguf"
  if [[ ! -f "$synth" ]]; then
    timeout 240 "$bin/gpu_bench" --write-only --write-8b "$synth" || fail "writing the 8B model"
  fi
  [[ -f "$synth" ]] && run cuda-bench-8b 240 "$bin/gpu_bench" --backend cuda "${peak[@]}" "$synth"
  # What the fused decode launches buy (the same model without them).
  [[ -f "$synth" ]] && run cuda-bench-8b-unfused 240 env SHOAL_CUDA_UNFUSED=1 "$bin/gpu_bench" \
    --backend cuda "${peak[@]}" "$synth"
fi

step "done, status $status"
report="${OUT:-$BUILD_DIR}/gpu-report.json"
{
  printf '{"gpu": "%s", "cuda_arch": "%s", "dry_run": %s, "status": %d, "seconds": %d, "steps": [' \
    "$gpuName" "$arch" "$([[ $dryRun == 1 ]] && echo true || echo false)" "$status" \
    "$(($(date +%s) - start))"
  sep=""
  for line in "${reportLines[@]}"; do printf '%s\n  %s' "$sep" "$line"; sep=","; done
  printf '\n]}\n'
} >"$report"
echo "report: $report"
cat "$report"
exit $status
