#!/usr/bin/env bash
# Writes what tests/gpu/run_on_device.sh needs and a GPU machine cannot make itself, into
# models/gpu/ (git-ignored; carry that one path, ~39 MB, to the GPU machine):
#   smollm2-first4.gguf    the default model's first 4 layers (real tokenizer and weights),
#                          written by shoal-synth-model --truncate-from (the whole model, 98 MB,
#                          is over what a run may carry)
#   fixture_prompts.bin    the fixture prompts, NUL-separated (tests/gpu/fixture_prompts.py)
# Needs a main build (scripts/build) and the default model (scripts/setup). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${SHOAL_BUILD_DIR:-build}"
source="models/SmolLM2-135M-Instruct.Q4_1.gguf"
out="models/gpu"
layers=4
[[ -f "$source" ]] || { echo "prepare_carry: $source missing (run scripts/setup)" >&2; exit 1; }
[[ -x "$build/tools/shoal-synth-model" ]] ||
  { echo "prepare_carry: $build/tools/shoal-synth-model missing (run scripts/build)" >&2; exit 1; }
mkdir -p "$out"
if [[ ! -f "$out/smollm2-first$layers.gguf" ]]; then
  "$build/tools/shoal-synth-model" --truncate-from "$source" --layers "$layers" \
    --out "$out/smollm2-first$layers.gguf"
fi
python3 tests/gpu/fixture_prompts.py "$out/fixture_prompts.bin"
du -sh "$out"
