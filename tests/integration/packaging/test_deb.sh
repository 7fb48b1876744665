#!/usr/bin/env bash
# Builds the .deb and the tarball with CPack, installs the .deb with apt-get (as a user would),
# runs shoal-cli from the installed paths, starts the systemd unit's command line as the unit's
# user and checks the API answers, stops it (SIGTERM, exit 0), and removes the package.
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
cleanup() {
    [[ -n "$nodePid" ]] && kill "$nodePid" 2>/dev/null || true
    [[ -n "$modelCopy" ]] && rm -f "$modelCopy"
    DEBIAN_FRONTEND=noninteractive apt-get remove -y shoal >/dev/null 2>&1 || true
}
trap cleanup EXIT

step "apt-get install ./$deb"
DEBIAN_FRONTEND=noninteractive apt-get install -y "./$deb"
for f in /usr/bin/shoal-cli /usr/bin/shoal-node /usr/bin/shoal-fetch-default-model \
         /usr/lib/systemd/system/shoal-node.service; do
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
echo "PASS"
