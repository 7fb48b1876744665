#!/usr/bin/env python3
"""Drives shoal-node's OpenAI-compatible API with the official `openai` client (pinned, in a venv)
and with curl, as a user's program would.

Checks: models list; non-streamed and streamed chat completions with the default model (usage
counts, finish reasons); errors in OpenAI's shape (unknown model 404, bad parameter 400, malformed
JSON 400 via curl, context overflow 400, missing API key 401, full queue 429 with Retry-After);
16 concurrent streamed requests (batched together, 4 at a time) each stream exactly the text the
same request gets alone; a client that disconnects mid-stream cancels its generation; a tool
conversation as the client sends it is answered, a forced call refused; 16 sequences
of ~512 tokens fill 16 slots within the KV budget while a 17th waits and an 18th gets 429.

Run by CTest (tests/integration/api/CMakeLists.txt). Exit 77 = skipped (no model, no network for
pip): CTest reports it as skipped, with the reason on stderr.
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback

OPENAI_PIN = "openai==3.57.0"
SKIP = 77


def skip(reason):
    print(f"SKIP: {reason}", file=sys.stderr)
    sys.exit(SKIP)


def ensure_venv(venv):
    """Re-run this script under a venv that has the pinned client (created once, reused)."""
    python = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    marker = os.path.join(venv, ".shoal-" + OPENAI_PIN)
    if not os.path.exists(marker):
        if not os.path.exists(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        r = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            OPENAI_PIN], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "pip failed"
            skip(f"cannot install {OPENAI_PIN} into {venv} (no network to PyPI?): {last}")
        open(marker, "w").close()
    os.execv(python, [python] + sys.argv)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(port, path, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, json.loads(body)


def post(port, path, body, headers=None):
    """POST a JSON body (dict) or raw bytes; returns (status, headers, parsed JSON body)."""
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=data, headers=h)
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, dict(r.getheaders()), json.loads(raw)


class Node:
    """One shoal-node process on a free loopback port."""

    def __init__(self, exe, model, extra=(), env=None):
        self.port = free_port()
        self.env = env
        self.log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                     f"shoal-node-test-{self.port}.log"), "w+")
        self.proc = subprocess.Popen(
            [exe, "-m", model, "--api-port", str(self.port), "--threads", "2", "--no-pool", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"shoal-node exited with {self.proc.returncode}: " + self.text())
            try:
                if get_json(self.port, "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("shoal-node did not answer /health within 60 s: " + self.text())

    def text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def health(self):
        """The full /health (with the key when the node has one: without, it says only "ok")."""
        key = (self.env or {}).get("SHOAL_API_KEY")
        return get_json(self.port, "/health",
                        {"Authorization": "Bearer " + key} if key else None)[1]

    def stop(self):
        self.proc.terminate()
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("shoal-node did not stop within 30 s of SIGTERM")
        assert rc == 0, f"shoal-node exited {rc} on SIGTERM: " + self.text()


def wait_for(predicate, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# ---- checks against the default node -------------------------------------------------------

def check_models_list(client, node):
    models = client.models.list().data
    assert len(models) == 1, models
    assert models[0].id == node.health()["model"], (models[0].id, node.health())
    return models[0].id


def check_chat_non_streamed(client, model):
    r = client.chat.completions.create(
        model=model, temperature=0, max_tokens=16,
        messages=[{"role": "user", "content": "Name a colour."}])
    text = r.choices[0].message.content
    assert r.choices[0].message.role == "assistant"
    assert isinstance(text, str) and text.strip(), repr(text)
    assert r.choices[0].finish_reason in ("stop", "length"), r.choices[0].finish_reason
    u = r.usage
    assert u.prompt_tokens > 3 and 1 <= u.completion_tokens <= 16, u
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
    if r.choices[0].finish_reason == "length":
        assert u.completion_tokens == 16, u


def check_chat_streamed(client, model):
    stream = client.chat.completions.create(
        model=model, temperature=0.7, top_p=0.9, seed=7, max_tokens=12, stream=True,
        stream_options={"include_usage": True}, stop=["\n\n"],
        messages=[{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Say hello."}])
    pieces, finish, usage, roles = [], None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                pieces.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    text = "".join(pieces)
    assert roles == ["assistant"], roles
    assert text.strip(), repr(text)
    assert finish in ("stop", "length"), finish
    assert usage is not None and 1 <= usage.completion_tokens <= 12, usage


def check_completion(client, model):
    r = client.completions.create(model=model, prompt="The sky is", max_tokens=5, temperature=0)
    assert r.choices[0].text, r
    assert r.usage.completion_tokens <= 5 and r.usage.prompt_tokens >= 3, r.usage


def check_errors_via_client(client, model):
    import openai
    try:
        client.chat.completions.create(model="no-such-model", max_tokens=4,
                                       messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.code == "model_not_found", (e.status_code, e.code)
    try:
        client.chat.completions.create(model=model, temperature=5, max_tokens=4,
                                       messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("temperature 5 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.param == "temperature", (e.status_code, e.param)
    try:
        client.chat.completions.create(model=model, n=2, max_tokens=4,
                                       messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("n=2 was accepted")
    except openai.BadRequestError as e:
        assert e.param == "n", e.param


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def check_tools_through_the_client(client, model):
    """What the client sends for a tool conversation (its own tool_calls and tool messages, content
    None) is accepted and answered; a forced call is refused. Whether SmolLM2 calls the tool is
    its business: it was not trained to, so the reply may be text (test_api_tool_calls checks
    that calls in a reply come back as tool_calls)."""
    import openai
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    ]
    r = client.chat.completions.create(model=model, temperature=0, max_tokens=16,
                                       tools=[WEATHER_TOOL], messages=history)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls"), choice.finish_reason
    for call in choice.message.tool_calls or []:
        assert call.type == "function" and call.function.name, call
        json.loads(call.function.arguments)
    assert r.usage.prompt_tokens > 100, r.usage  # the tools block is in the prompt
    plain = client.chat.completions.create(model=model, temperature=0, max_tokens=16,
                                           tools=[WEATHER_TOOL], tool_choice="none",
                                           messages=history[:1])
    assert plain.usage.prompt_tokens < r.usage.prompt_tokens, (plain.usage, r.usage)
    try:
        client.chat.completions.create(model=model, max_tokens=4, tools=[WEATHER_TOOL],
                                       tool_choice="required", messages=history[:1])
        raise AssertionError("tool_choice=required was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.param == "tool_choice", (e.status_code, e.param)


def check_malformed_json_with_curl(port):
    curl = shutil.which("curl")
    cmd = [curl, "-s", "-w", "\n%{http_code}", "-X", "POST", "-H",
           "Content-Type: application/json", "--data-binary", '{"model": "x", "messages": [',
           f"http://127.0.0.1:{port}/v1/chat/completions"] if curl else None
    if cmd is None:
        raise AssertionError("curl is not installed (the test needs it for the raw request)")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout
    body, status = out.rsplit("\n", 1)
    assert status == "400", (status, body)
    err = json.loads(body)["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_json", err
    assert "not valid JSON" in err["message"], err


def check_concurrent_streams(client, model, node, count=16):
    def ask(i, stream):
        return client.chat.completions.create(
            model=model, temperature=0, max_tokens=12 + i % 5, stream=stream,
            messages=[{"role": "user", "content": f"Count from {i} to {i + 5}."}])

    # Each request alone first: the reference for its batched run (batch invariance).
    solo = [ask(i, False).choices[0].message.content for i in range(count)]
    before = node.health()["queue"]["completed"]
    results = [None] * count
    errors = []
    most_running = [0]

    def worker(i):
        try:
            pieces, finish = [], None
            for chunk in ask(i, True):
                for c in chunk.choices:
                    if c.delta.content:
                        pieces.append(c.delta.content)
                    if c.finish_reason:
                        finish = c.finish_reason
            results[i] = ("".join(pieces), finish)
        except Exception as e:  # noqa: BLE001 - reported below with the index
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        most_running[0] = max(most_running[0], node.health()["queue"]["running"])
        time.sleep(0.02)
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for i, r in enumerate(results):
        assert r is not None, f"stream {i} did not finish"
        text, finish = r
        assert text.strip() and finish in ("stop", "length"), (i, text, finish)
        assert text == solo[i], f"stream {i}: batched {text!r} != alone {solo[i]!r}"
    q = node.health()["queue"]
    assert q["completed"] - before == count, q
    # They really ran together: as many at once as the node has slots.
    assert most_running[0] == q["slots"] == 4, (most_running[0], q)


def check_disconnect_cancels(node, model):
    before = node.health()["queue"]["cancelled"]
    c = http.client.HTTPConnection("127.0.0.1", node.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps({
        "model": model, "prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True,
        "temperature": 0, "stream": True}), headers={"Content-Type": "application/json"})
    sock = c.sock  # the server answers "Connection: close": getresponse() lets go of c.sock
    r = c.getresponse()
    assert r.status == 200, r.status
    got = b""
    while got.count(b"data: ") < 3:
        got += r.read1(4096) if hasattr(r, "read1") else r.read(64)
    sock.shutdown(socket.SHUT_RDWR)
    r.close()
    c.close()
    # 3000 tokens would take minutes; a cancelled job ends at once.
    wait_for(lambda: node.health()["queue"]["cancelled"] > before and
             not node.health()["queue"]["running"], "the abandoned stream to be cancelled")


# ---- checks against a small node with a key and a short queue --------------------------------

def check_auth_overflow_and_queue(exe, model_path):
    key = "test-key-123"
    node = Node(exe, model_path, ["--max-queue", "1", "--parallel", "1", "--ctx", "256"],
                {"SHOAL_API_KEY": key})
    try:
        auth = {"Authorization": "Bearer " + key}
        status, _, body = post(node.port, "/v1/completions",
                               {"model": "default", "prompt": "hi", "max_tokens": 2})
        assert status == 401 and body["error"]["code"] == "invalid_api_key", (status, body)
        status, _, body = post(node.port, "/v1/completions",
                               {"model": "default", "prompt": "hi", "max_tokens": 2}, auth)
        assert status == 200 and body["usage"]["completion_tokens"] <= 2, (status, body)
        assert get_json(node.port, "/health")[0] == 200  # /health needs no key (says only "ok")

        # Context overflow: a prompt longer than the 256-token context.
        status, _, body = post(node.port, "/v1/completions",
                               {"model": "default", "prompt": "word " * 600, "max_tokens": 2},
                               auth)
        assert status == 400 and body["error"]["code"] == "context_length_exceeded", (status, body)

        # Full queue: one job running, one waiting, the third is refused with 429.
        long_job = {"model": "default", "prompt": "Once", "max_tokens": 200, "ignore_eos": True,
                    "temperature": 0}
        outcomes = []
        t1 = threading.Thread(target=lambda: outcomes.append(
            post(node.port, "/v1/completions", long_job, auth)[0]))
        t1.start()
        wait_for(lambda: node.health()["queue"]["running"], "the first job to run")
        t2 = threading.Thread(target=lambda: outcomes.append(
            post(node.port, "/v1/completions", long_job, auth)[0]))
        t2.start()
        wait_for(lambda: node.health()["queue"]["waiting"] == 1, "the second job to wait")
        status, headers, body = post(node.port, "/v1/completions", long_job, auth)
        assert status == 429 and body["error"]["type"] == "rate_limit_error", (status, body)
        assert headers.get("Retry-After"), headers
        t1.join(120)
        t2.join(120)
        assert outcomes == [200, 200], outcomes  # the queued one was served, not dropped
    finally:
        node.stop()


# ---- checks against a node with 16 slots of 512 tokens ------------------------------------

def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def check_sixteen_full_slots_and_the_rest_wait(exe, model_path):
    """16 sequences of ~512 tokens fill the 16 slots within the KV budget; a 17th waits for a
    slot, an 18th (queue of 1 full) gets 429; every one completes, nothing crashes."""
    node = Node(exe, model_path, ["--parallel", "16", "--ctx", "512", "--max-queue", "1"])
    try:
        q = node.health()["queue"]
        assert q["slots"] == 16, q
        budget_kb = q["kv_cache_bytes"] / 1024
        # One short request first, so that the weights (mapped from the file) are resident.
        assert post(node.port, "/v1/completions",
                    {"model": "default", "prompt": "Hi", "max_tokens": 2})[0] == 200
        rss_before = rss_kb(node.proc.pid)
        # ~190 prompt tokens + 300 new ones: each sequence ends near 500 of its 512 positions.
        prompt = "The river runs past the old mill and under the stone bridge. " * 15
        job = {"model": "default", "prompt": prompt, "max_tokens": 300, "ignore_eos": True,
               "temperature": 0}
        statuses, lock = [], threading.Lock()

        def one():
            status, _, body = post(node.port, "/v1/completions", job)
            with lock:
                statuses.append((status, body.get("usage", {}).get("completion_tokens")))

        threads = [threading.Thread(target=one) for _ in range(16)]
        for t in threads:
            t.start()
        wait_for(lambda: node.health()["queue"]["running"] == 16, "16 sequences to run", 60)
        seventeenth = threading.Thread(target=one)
        seventeenth.start()
        wait_for(lambda: node.health()["queue"]["waiting"] == 1, "the 17th to wait", 60)
        status, headers, body = post(node.port, "/v1/completions", job)
        assert status == 429 and headers.get("Retry-After"), (status, body)
        peak = 0
        while any(t.is_alive() for t in threads):
            peak = max(peak, rss_kb(node.proc.pid))
            time.sleep(0.05)
        for t in threads + [seventeenth]:
            t.join(300)
        assert sorted(statuses) == [(200, 300)] * 17, statuses
        growth_kb = peak - rss_before
        # The caches (f16 K and V of 16 x 512 positions) plus the batch's activations and the
        # HTTP threads: well within the budget and a little room.
        assert growth_kb <= budget_kb * 1.25 + 64 * 1024, (growth_kb, budget_kb)
        print(f"  16 x 512 positions: RSS grew {growth_kb / 1024:.1f} MiB, "
              f"KV budget {budget_kb / 1024:.1f} MiB")
    finally:
        node.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True, help="shoal-node executable")
    ap.add_argument("--model", required=True, help="the default model (GGUF)")
    ap.add_argument("--venv", required=True, help="venv directory for the pinned openai client")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        skip(f"the default model is not at {args.model} (scripts/setup fetches it)")
    ensure_venv(args.venv)
    import openai

    node = Node(args.node, args.model)
    checks = []
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{node.port}/v1", api_key="unused",
                               max_retries=0, timeout=120)
        model = check_models_list(client, node)
        checks = [
            ("chat, not streamed", lambda: check_chat_non_streamed(client, model)),
            ("chat, streamed", lambda: check_chat_streamed(client, model)),
            ("completion", lambda: check_completion(client, model)),
            ("errors through the client", lambda: check_errors_via_client(client, model)),
            ("tools through the client", lambda: check_tools_through_the_client(client, model)),
            ("malformed JSON with curl", lambda: check_malformed_json_with_curl(node.port)),
            ("16 concurrent streams", lambda: check_concurrent_streams(client, model, node)),
            ("disconnect cancels", lambda: check_disconnect_cancels(node, model)),
        ]
        for name, fn in checks:
            t0 = time.time()
            fn()
            print(f"PASS {name} ({time.time() - t0:.1f} s)")
        node.stop()
        node = None
        t0 = time.time()
        check_auth_overflow_and_queue(args.node, args.model)
        print(f"PASS api key, context overflow, full queue ({time.time() - t0:.1f} s)")
        t0 = time.time()
        check_sixteen_full_slots_and_the_rest_wait(args.node, args.model)
        print(f"PASS 16 full slots, a 17th waits, an 18th is refused ({time.time() - t0:.1f} s)")
    except Exception:
        traceback.print_exc()
        if node:
            print("---- shoal-node log ----\n" + node.text(), file=sys.stderr)
        sys.exit(1)
    finally:
        if node and node.proc.poll() is None:
            node.proc.kill()
    print(f"all checks passed ({OPENAI_PIN})")


if __name__ == "__main__":
    main()
