#!/usr/bin/env python3
"""Attacks on shoal-node's API (issue 14, items 2, 3 and 8), against the real binary on loopback.

Each check is one behaviour, named for it; every attack loop is bounded in bytes and time, and
every connection goes to 127.0.0.1. Only the standard library is used (no pip, no network).

- Nested JSON a million deep (2 MB, under the body limit) is a 400; the node keeps serving.
- Error messages do not echo a huge value back.
- A chunked body that keeps coming, and a POST without a length, are refused before they are
  read: the node's memory stays put (VmRSS) and it keeps serving.
- Hundreds of idle connections do not cost the node a descriptor each (its open descriptors stay
  bounded), and once they close /health answers.
- The API is not served beyond loopback without a key (exit 2, one line); SHOAL_API_KEY sets
  the key; a wrong key is a 401; /health tells nothing but "ok" without the key.
- On a loopback bind a foreign Host (DNS rebinding) or Origin is a 403; a body that is not
  application/json (a browser form or a text/plain fetch) is a 415, and its body is never run as a
  request of its own.

Run by CTest (tests/integration/api/CMakeLists.txt). Exit 77 = skipped (no model).
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import tempfile
import time
import traceback

SKIP = 77
# The node's memory may grow this much during the flood (allocator noise, thread stacks):
# unbounded buffering of the flood below would grow it by ~8 x 32 MB.
RSS_GROWTH_LIMIT_KB = 64 * 1024
FLOOD_CONNECTIONS = 8
FLOOD_BYTES_PER_CONNECTION = 32 << 20
FLOOD_SECONDS = 20
# Idle connections opened at once, and the node's open descriptors they may cost: the API holds at
# most its HTTP threads (64) plus kMaxPendingConnections (64) of them; the rest wait in the kernel's
# listen backlog. Unbounded, the node would hold one descriptor per connection (400+).
IDLE_CONNECTIONS = 400
FD_LIMIT = 200  # 64 + 64 for the API, the rest for the node's own files
# Connects go one at a time, each with this timeout (past the first SYN retry, 1 s, which a node
# still starting up may cause); a few timeouts in a row mean the node stopped accepting, and the
# rest would wait in its listen backlog. The attack ends then, or after IDLE_SECONDS (on a machine
# so loaded that the node accepts slower than its read timeouts close idle connections, descriptors
# would not pile up either way).
IDLE_CONNECT_TIMEOUT = 1.5
IDLE_CONNECT_MISSES = 3
IDLE_SECONDS = 12


def skip(reason):
    print(f"SKIP: {reason}", file=sys.stderr)
    sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, headers=None, timeout=60):
    """One request; returns (status, headers dict, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def post_json(port, path, payload, headers=None):
    data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return request(port, "POST", path, data, h)


def raw_exchange(port, data, timeout=10):
    """Send raw bytes, then read until the server closes; returns what came back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            got += chunk
        return got


class Node:
    """One shoal-node process serving the API on a free loopback port (no pool)."""

    def __init__(self, exe, model, extra=(), env=None):
        self.port = free_port()
        # An anonymous temporary file: read back on failure, gone when the test ends.
        self.log = tempfile.TemporaryFile(mode="w+")
        full_env = dict(os.environ)
        full_env.pop("SHOAL_API_KEY", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [exe, "-m", model, "--api-port", str(self.port), "--threads", "2", "--no-pool",
             "--ctx", "256", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=full_env)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"shoal-node exited with {self.proc.returncode}: " + self.text())
            try:
                if request(self.port, "GET", "/health", timeout=5)[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("shoal-node did not answer /health within 60 s: " + self.text())

    def text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS in /proc/<pid>/status")

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def assert_serving(self, headers=None):
        """The node is alive and answers /health and a short completion."""
        assert self.proc.poll() is None, f"shoal-node died ({self.proc.returncode}): " + self.text()
        status, _, _ = request(self.port, "GET", "/health", headers=headers)
        assert status == 200, status
        status, _, body = post_json(self.port, "/v1/completions",
                                    {"model": "default", "prompt": "hi", "max_tokens": 2},
                                    headers)
        assert status == 200, (status, body[:300])
        assert json.loads(body)["usage"]["completion_tokens"] <= 2, body[:300]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ---- item 2: nested JSON ---------------------------------------------------------------------

def deeply_nested_json_is_a_400_and_the_node_keeps_serving(node):
    depth = 1_000_000
    body = '{"model":"default","prompt":"hi","max_tokens":' + "[" * depth + "]" * depth + "}"
    assert len(body) < 4 << 20  # under the body limit: the parser sees it
    status, _, raw = post_json(node.port, "/v1/completions", body)
    assert status == 400, (status, raw[:300])
    err = json.loads(raw)["error"]
    assert err["code"] == "invalid_json" and "deeper than" in err["message"], err
    chat = '{"model":"default","messages":' + "[" * depth + "]" * depth + "}"
    status, _, raw = post_json(node.port, "/v1/chat/completions", chat)
    assert status == 400, (status, raw[:300])
    node.assert_serving()


def error_messages_do_not_echo_a_huge_value(node):
    huge = "x" * (1 << 20)
    for payload in ({"model": huge, "prompt": "hi"},
                    {"model": "default", "prompt": "hi", "max_tokens": huge},
                    {"model": "default", "messages": [{"role": huge, "content": "hi"}]}):
        path = "/v1/chat/completions" if "messages" in payload else "/v1/completions"
        status, _, raw = post_json(node.port, path, payload)
        assert status in (400, 404), (status, raw[:300])
        assert len(raw) < 2048, (len(raw), raw[:300])
    status, _, raw = post_json(node.port, "/v1/completions", '{"model": "' + huge)  # unterminated
    assert status == 400 and len(raw) < 2048, (status, len(raw))


# ---- item 3: bodies without a bound ----------------------------------------------------------

def flood(port, head, make_chunk, done_sending, release):
    """Send `head` then chunks until the server cuts us off or the byte/time budget ends; then
    set `done_sending` and hold the connection open until `release` (the node's memory is sampled
    meanwhile). Returns (bytes sent, what the server answered)."""
    sent = 0
    answer = b""
    deadline = time.time() + FLOOD_SECONDS
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            try:
                s.sendall(head)
                chunk = make_chunk()
                while sent < FLOOD_BYTES_PER_CONNECTION and time.time() < deadline:
                    s.sendall(chunk)
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                pass
            done_sending.set()
            release.wait(FLOOD_SECONDS + 10)
            try:
                s.settimeout(2)
                answer = s.recv(4096)
            except (ConnectionResetError, socket.timeout, OSError):
                pass
    finally:
        done_sending.set()
    return sent, answer


def run_flood(node, head, make_chunk):
    """FLOOD_CONNECTIONS floods at once; returns (peak VmRSS growth in kB, per-flood results).
    The peak is sampled while the floods hold their connections open: a body the server buffered
    is freed when its connection ends."""
    before = node.rss_kb()
    results = [None] * FLOOD_CONNECTIONS
    done = [threading.Event() for _ in range(FLOOD_CONNECTIONS)]
    release = threading.Event()

    def worker(i):
        results[i] = flood(node.port, head, make_chunk, done[i], release)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(FLOOD_CONNECTIONS)]
    for t in threads:
        t.start()
    peak = before
    deadline = time.time() + FLOOD_SECONDS + 5
    while time.time() < deadline and not all(d.is_set() for d in done):
        if node.proc.poll() is not None:
            break
        peak = max(peak, node.rss_kb())
        time.sleep(0.05)
    time.sleep(0.5)  # what is still in flight reaches the node
    if node.proc.poll() is None:
        peak = max(peak, node.rss_kb())
    release.set()
    for t in threads:
        t.join(FLOOD_SECONDS + 30)
    return peak - before, results


def an_endless_chunked_body_is_refused_and_memory_stays_bounded(node):
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    piece = b"x" * 65536
    growth, results = run_flood(node, head, lambda: b"10000\r\n" + piece + b"\r\n")
    print(f"  VmRSS peak growth during the chunked flood: {growth} kB")
    assert growth < RSS_GROWTH_LIMIT_KB, f"VmRSS grew {growth} kB during the chunked flood"
    for sent, answer in results:
        # Cut off: the server answered 411 (or closed) long before the budget was sent.
        assert sent < FLOOD_BYTES_PER_CONNECTION, sent
        assert answer == b"" or answer.startswith(b"HTTP/1.1 411"), answer[:200]
    node.assert_serving()


def a_post_without_content_length_is_refused_and_memory_stays_bounded(node):
    # Without a length the library would read the body until the peer closes.
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\n"
            "Content-Type: application/json\r\n\r\n").encode()
    growth, results = run_flood(node, head, lambda: b"x" * 65536)
    print(f"  VmRSS peak growth during the unbounded-POST flood: {growth} kB")
    assert growth < RSS_GROWTH_LIMIT_KB, f"VmRSS grew {growth} kB during the unbounded-POST flood"
    for sent, answer in results:
        assert sent < FLOOD_BYTES_PER_CONNECTION, sent
        assert answer == b"" or answer.startswith(b"HTTP/1.1 411"), answer[:200]
    node.assert_serving()


def an_endless_header_line_is_cut_off_and_memory_stays_bounded(node):
    # cpp-httplib 0.11.4 buffers a header line until it ends; the head is bounded as it is read.
    head = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\nX-Long: ".encode()
    growth, results = run_flood(node, head, lambda: b"a" * 65536)
    print(f"  VmRSS peak growth during the header-line flood: {growth} kB")
    assert growth < RSS_GROWTH_LIMIT_KB, f"VmRSS grew {growth} kB during the header-line flood"
    for sent, answer in results:
        assert sent < FLOOD_BYTES_PER_CONNECTION, sent
        assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer[:200]
    node.assert_serving()


def an_endless_request_line_is_cut_off_and_memory_stays_bounded(node):
    growth, results = run_flood(node, b"GET /", lambda: b"a" * 65536)
    print(f"  VmRSS peak growth during the request-line flood: {growth} kB")
    assert growth < RSS_GROWTH_LIMIT_KB, f"VmRSS grew {growth} kB during the request-line flood"
    for sent, _ in results:
        assert sent < FLOOD_BYTES_PER_CONNECTION, sent
    node.assert_serving()


def a_body_just_under_the_limit_is_read_whole(node):
    # The bounded stream lets a legitimate large body through: it is parsed (and the prompt is
    # then too long for the 256-token context).
    prompt = "word " * ((4 << 20) // 5 - 100)
    status, _, raw = post_json(node.port, "/v1/completions",
                               {"model": "default", "prompt": prompt, "max_tokens": 2})
    assert status == 400, (status, raw[:300])
    assert json.loads(raw)["error"]["code"] == "context_length_exceeded", raw[:300]


def a_content_length_above_the_limit_is_a_413_without_reading_it(node):
    got = raw_exchange(node.port, (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n").encode())
    assert got.startswith(b"HTTP/1.1 413"), got[:200]


def idle_connections_do_not_pile_up_as_open_descriptors(node):
    conns = []
    peak = 0
    deadline = time.time() + IDLE_SECONDS
    try:
        # One at a time, each connected before the next (a burst would mostly be dropped by the
        # short listen backlog and retried seconds later).
        misses = 0
        while (len(conns) < IDLE_CONNECTIONS and misses < IDLE_CONNECT_MISSES
               and peak < FD_LIMIT and time.time() < deadline):
            s = socket.socket()
            conns.append(s)
            s.settimeout(IDLE_CONNECT_TIMEOUT)
            try:
                s.connect(("127.0.0.1", node.port))
                misses = 0
            except socket.timeout:
                misses += 1  # waiting in the listen backlog
            peak = max(peak, node.fd_count())
        time.sleep(0.5)  # the node accepts what it will meanwhile
        peak = max(peak, node.fd_count())
    finally:
        for s in conns:
            s.close()
    print(f"  open descriptors of the node with {len(conns)} idle connections: {peak}")
    assert peak < FD_LIMIT, f"the node held {peak} descriptors"
    deadline = time.time() + 30
    while True:
        try:
            status, _, _ = request(node.port, "GET", "/health", timeout=5)
            break
        except OSError:
            assert time.time() < deadline, "no /health answer within 30 s after the idle flood"
    assert status == 200, status
    node.assert_serving()


# ---- item 8: exposure ------------------------------------------------------------------------

def binding_beyond_loopback_without_a_key_is_refused(exe, model):
    env = dict(os.environ)
    env.pop("SHOAL_API_KEY", None)
    try:
        r = subprocess.run([exe, "-m", model, "--api-host", "0.0.0.0", "--api-port", "0",
                            "--no-pool"], capture_output=True, text=True, timeout=30, env=env)
    except subprocess.TimeoutExpired:
        raise AssertionError("shoal-node served 0.0.0.0 without an API key")
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "without an API key" in lines[0], r.stderr


def the_key_from_shoal_api_key_is_required(exe, model):
    node = Node(exe, model, env={"SHOAL_API_KEY": "k3y-from-env"})
    try:
        body = {"model": "default", "prompt": "hi", "max_tokens": 2}
        status, _, raw = post_json(node.port, "/v1/completions", body)
        assert status == 401 and json.loads(raw)["error"]["code"] == "invalid_api_key", status
        for wrong in ("Bearer k3y-from-env-", "Bearer k3y-from-en", "Bearer K3Y-FROM-ENV",
                      "Basic k3y-from-env", "k3y-from-env", "Bearer "):
            status, _, _ = post_json(node.port, "/v1/completions", body,
                                     {"Authorization": wrong})
            assert status == 401, (wrong, status)
        status, _, _ = request(node.port, "GET", "/v1/models",
                               headers={"Authorization": "Bearer nope"})
        assert status == 401, status
        node.assert_serving({"Authorization": "Bearer k3y-from-env"})
    finally:
        node.stop()


def health_without_the_key_tells_only_ok(exe, model):
    node = Node(exe, model, env={"SHOAL_API_KEY": "k3y"})
    try:
        status, _, raw = request(node.port, "GET", "/health")
        assert status == 200 and json.loads(raw) == {"status": "ok"}, (status, raw)
        status, _, raw = request(node.port, "GET", "/health",
                                 headers={"Authorization": "Bearer k3y"})
        assert status == 200 and "queue" in json.loads(raw), (status, raw)
    finally:
        node.stop()


def a_foreign_host_header_on_a_loopback_bind_is_a_403(node):
    for host in ("evil.example", f"evil.example:{node.port}", "127.0.0.1.evil.example",
                 f"127.0.0.1:{node.port + 1}", "localhost.:80"):
        status, _, raw = request(node.port, "GET", "/v1/models", headers={"Host": host})
        assert status == 403 and json.loads(raw)["error"]["code"] == "invalid_host", (host, status)
    for host in (f"localhost:{node.port}", f"127.0.0.1:{node.port}", f"[::1]:{node.port}",
                 "localhost"):
        status, _, _ = request(node.port, "GET", "/v1/models", headers={"Host": host})
        assert status == 200, (host, status)


def a_foreign_origin_on_a_loopback_bind_is_a_403(node):
    status, _, raw = request(node.port, "GET", "/v1/models",
                             headers={"Origin": "https://evil.example"})
    assert status == 403 and json.loads(raw)["error"]["code"] == "invalid_origin", status
    status, _, _ = request(node.port, "GET", "/v1/models",
                           headers={"Origin": "http://localhost:3000"})
    assert status == 200, status


def a_body_that_is_not_json_is_a_415(node):
    body = json.dumps({"model": "default", "prompt": "hi", "max_tokens": 2})
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x",
                  None):
        headers = {"Content-Type": ctype} if ctype else {}
        status, _, raw = request(node.port, "POST", "/v1/completions", body, headers)
        assert status == 415, (ctype, status, raw[:200])
        assert json.loads(raw)["error"]["code"] == "unsupported_media_type", raw[:200]
    status, _, _ = post_json(node.port, "/v1/completions", body,
                             {"Content-Type": "application/json; charset=utf-8"})
    assert status == 200, status


def a_refused_body_is_never_run_as_a_request(node):
    # A browser form posts text/plain; its body is a complete JSON request. Refused, the body is
    # not read, so the connection must close rather than parse it as the next request.
    inner = json.dumps({"model": "default", "prompt": "hi", "max_tokens": 2})
    smuggled = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(inner)}\r\n\r\n{inner}")
    outer = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\n"
             f"Content-Type: text/plain\r\nContent-Length: {len(smuggled)}\r\n\r\n{smuggled}")
    before = json.loads(request(node.port, "GET", "/health")[2])["queue"]["completed"]
    got = raw_exchange(node.port, outer.encode())
    assert got.startswith(b"HTTP/1.1 415"), got[:200]
    assert got.count(b"HTTP/1.1 ") == 1, got
    after = json.loads(request(node.port, "GET", "/health")[2])["queue"]["completed"]
    assert after == before, (before, after)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True, help="shoal-node executable")
    ap.add_argument("--model", required=True, help="the default model (GGUF)")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        skip(f"the default model is not at {args.model} (scripts/setup fetches it)")

    on_node = [
        deeply_nested_json_is_a_400_and_the_node_keeps_serving,
        error_messages_do_not_echo_a_huge_value,
        an_endless_chunked_body_is_refused_and_memory_stays_bounded,
        a_post_without_content_length_is_refused_and_memory_stays_bounded,
        an_endless_header_line_is_cut_off_and_memory_stays_bounded,
        an_endless_request_line_is_cut_off_and_memory_stays_bounded,
        a_body_just_under_the_limit_is_read_whole,
        a_content_length_above_the_limit_is_a_413_without_reading_it,
        idle_connections_do_not_pile_up_as_open_descriptors,
        a_foreign_host_header_on_a_loopback_bind_is_a_403,
        a_foreign_origin_on_a_loopback_bind_is_a_403,
        a_body_that_is_not_json_is_a_415,
        a_refused_body_is_never_run_as_a_request,
    ]
    on_exe = [
        binding_beyond_loopback_without_a_key_is_refused,
        the_key_from_shoal_api_key_is_required,
        health_without_the_key_tells_only_ok,
    ]
    only = os.environ.get("SHOAL_TEST_ONLY")  # run one check by name while debugging
    failed = []
    node = Node(args.node, args.model)
    try:
        for check in on_node:
            if only and check.__name__ != only:
                continue
            if node.proc.poll() is not None:  # a crash earlier: later checks need a node
                node.stop()
                node = Node(args.node, args.model)
            t0 = time.time()
            try:
                check(node)
                print(f"PASS {check.__name__} ({time.time() - t0:.1f} s)")
            except Exception:  # noqa: BLE001 - every check reports, then the run fails
                traceback.print_exc()
                print(f"FAIL {check.__name__}\n---- shoal-node log (tail) ----\n"
                      + node.text()[-3000:], file=sys.stderr)
                failed.append(check.__name__)
    finally:
        node.stop()
    for check in on_exe:
        if only and check.__name__ != only:
            continue
        t0 = time.time()
        try:
            check(args.node, args.model)
            print(f"PASS {check.__name__} ({time.time() - t0:.1f} s)")
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            print(f"FAIL {check.__name__}", file=sys.stderr)
            failed.append(check.__name__)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
