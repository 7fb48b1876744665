#!/usr/bin/env bash
# Creates (once) the Python venv that holds the pinned llama.cpp reference, llama-cpp-python,
# built from its sdist so the vendored llama.cpp is compiled for this machine, and prints the
# venv path. Used by gen_fixtures.py; nothing in the Shoal build depends on it.
#
#   SHOAL_LLAMACPP_VENV   venv location (default: $HOME/.cache/shoal/llama-venv)
#   SHOAL_LLAMACPP_JOBS   parallel compile jobs for the sdist build (default: nproc)
set -euo pipefail

readonly kVersion="0.3.36"
venv="${SHOAL_LLAMACPP_VENV:-$HOME/.cache/shoal/llama-venv}"

installedVersion() {
    "$venv/bin/python" -c 'import llama_cpp, numpy; print(llama_cpp.__version__)' 2>/dev/null || true
}

if [[ -x "$venv/bin/python" && "$(installedVersion)" == "$kVersion" ]]; then
    echo "$venv"
    exit 0
fi

echo "venv.sh: building llama-cpp-python==$kVersion from source into $venv (takes a while)" >&2
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
# --no-binary: the prebuilt wheels target generic CPUs; building from the sdist uses the
# machine's native ISA, like the llama.cpp build we compare speed against.
CMAKE_BUILD_PARALLEL_LEVEL="${SHOAL_LLAMACPP_JOBS:-$(nproc)}" \
    "$venv/bin/python" -m pip install --disable-pip-version-check \
    --no-binary llama-cpp-python "llama-cpp-python==$kVersion" numpy >&2

[[ "$(installedVersion)" == "$kVersion" ]] ||
    { echo "venv.sh: llama_cpp $kVersion not importable from $venv after install" >&2; exit 1; }
echo "$venv"
