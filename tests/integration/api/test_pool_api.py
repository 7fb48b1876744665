#!/usr/bin/env python3
"""`shoal-cli pool serve`: the OpenAI-compatible API over a pool, driven as a client would.

Four shoal-node processes on loopback, a coordinator that deploys the default model over three
or four of them (each may use 75% of its size) and serves the API. Checks: /v1/models and
/health; four greedy chat requests streamed at once each get exactly the text the same request
gets alone; the same four again while a middle node is killed with SIGKILL mid-reply: every
stream completes with its solo text (the pool re-plans over the other nodes and each reply
replays its own tokens). Then, over the three survivors and a fifth node, the API with two
replicas (`--replicas 2`, each a pipeline of two nodes): eight streams at once, routed between
the replicas, each get their solo text, and /health shows both replicas serving.

Standard library only. Run by CTest (tests/integration/api/CMakeLists.txt). Exit 77 = skipped
(no default model).
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
QUESTIONS = ["What is the capital of France?", "Write a haiku about the sea.",
             "List three prime numbers.", "Name a famous painter."]


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def wait_for_line(path, pattern, what, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, encoding="utf-8", errors="replace") as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    with open(path, encoding="utf-8", errors="replace") as f:
        fail(f"{what} did not show up (exit code {proc.poll()}); output:\n{f.read()}")


def get_json(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    return r.status, body


def stream_chat(port, question, max_tokens, first_text=None):
    """One streamed greedy chat completion; returns (text, finish_reason). Sets `first_text`
    (a threading.Event) once the first piece of text has arrived."""
    body = {"model": "default", "stream": True, "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": question}]}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"chat completion answered {r.status}: {r.read()[:300]!r}")
    text, finish = "", None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if "error" in event:
            raise RuntimeError(f"stream error: {event['error']['message']}")
        for choice in event.get("choices", []):
            piece = choice.get("delta", {}).get("content") or ""
            text += piece
            if piece and first_text is not None:
                first_text.set()
            finish = choice.get("finish_reason") or finish
    c.close()
    return text, finish


def concurrently(port, max_tokens, while_running=None, questions=QUESTIONS):
    results = [None] * len(questions)
    started = [threading.Event() for _ in questions]

    def run(i):
        try:
            results[i] = stream_chat(port, questions[i], max_tokens, started[i])
        except Exception as e:  # reported by the main thread
            results[i] = e
            started[i].set()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(questions))]
    for t in threads:
        t.start()
    if while_running:
        for e in started:
            e.wait(120)
        while_running()
    for t in threads:
        t.join()
    for q, r in zip(questions, results):
        if isinstance(r, Exception):
            fail(f"{q!r}: {r}")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    if not os.path.exists(a.model):
        print(f"SKIP: no model at {a.model} (run scripts/setup)", file=sys.stderr)
        sys.exit(SKIP)
    work = tempfile.mkdtemp(prefix="shoal-pool-api-")
    procs = {}
    try:
        models = os.path.join(work, "models")
        os.makedirs(models)
        os.symlink(os.path.abspath(a.model), os.path.join(models, "model.gguf"))
        cli_dir = os.path.join(work, "cli")
        coordinator = subprocess.run([a.node, "--print-device-id", "--config-dir", cli_dir],
                                     check=True, capture_output=True, text=True).stdout.strip()
        nodes, trusted = [], []
        for i in range(1, 6):
            name = f"node{i}"
            out = os.path.join(work, f"{name}.out")
            with open(out, "w") as log:
                procs[name] = subprocess.Popen(
                    [a.node, "--name", name, "--config-dir", os.path.join(work, name), "--port",
                     "0", "--bind", "127.0.0.1", "--no-discovery", "--threads", "1",
                     "--models-dir", models, "--trust", coordinator],
                    stdout=log, stderr=subprocess.STDOUT)
            # One at a time: each measures its CPU profile alone.
            m = wait_for_line(out, r"device ([A-Z0-9-]+),? port (\d+)", f"{name}'s port",
                              procs[name])
            trusted.append({"id": m.group(1), "name": name})
            nodes.append(f"127.0.0.1:{m.group(2)}")
        with open(os.path.join(cli_dir, "trusted.json"), "w") as f:
            json.dump({"devices": trusted}, f)

        # Each node may use 75% of the model's size: with the KV caches of four replies and the
        # tied embedding on both ends that takes three or four stages, and any three nodes still
        # hold it once one is gone.
        cap_mb = os.path.getsize(a.model) * 75 // 100 // 1000000
        serve_out = os.path.join(work, "serve.out")
        with open(serve_out, "w") as log:
            procs["serve"] = subprocess.Popen(
                [a.cli, "pool", "serve", "--nodes", ",".join(nodes[:4]), "--config-dir", cli_dir,
                 "-m", a.model, "--ctx", "512", "--max-device-memory-mb", str(cap_mb),
                 "--parallel", "4", "--api-port", "0", "-v"],
                stdout=log, stderr=subprocess.STDOUT)
        api_line = r"\[pool: (.*); 4 replies at once\] API on http://127\.0\.0\.1:(\d+)/v1"
        m = wait_for_line(serve_out, api_line, "the API line", procs["serve"], timeout=180)
        pipeline, port = m.group(1), int(m.group(2))
        holders = re.findall(r"layers \d+-\d+ on (node\d)", pipeline)
        if len(holders) < 3:
            fail(f"expected three stages or more, got: {pipeline}")

        status, listed = get_json(port, "/v1/models")
        if status != 200 or not listed.get("data"):
            fail(f"/v1/models: {status} {listed}")
        status, health = get_json(port, "/health")
        if status != 200 or health.get("queue", {}).get("slots") != 4:
            fail(f"/health: {status} {health}")

        # Each request alone, then all four at once: the same texts.
        solo = [stream_chat(port, q, 24) for q in QUESTIONS]
        together = concurrently(port, 24)
        for q, s, t in zip(QUESTIONS, solo, together):
            if s != t:
                fail(f"{q!r}: alone {s!r}, with the others {t!r}")

        # The middle node killed while four longer replies stream.
        solo = [stream_chat(port, q, 64) for q in QUESTIONS]
        middle = procs[holders[1]]
        survived = concurrently(port, 64, while_running=lambda: middle.send_signal(signal.SIGKILL))
        for q, s, t in zip(QUESTIONS, solo, survived):
            if s != t:
                fail(f"{q!r} across the lost node: alone {s!r}, after the loss {t!r}")
        with open(serve_out) as f:
            log = f.read()
        if "failed after" not in log:
            fail(f"no recovery was logged:\n{log}")
        procs["serve"].send_signal(signal.SIGTERM)
        procs["serve"].wait(60)

        # Two replicas over the three survivors and node5: each node may hold the whole
        # model's size, not its KV caches and both ends, so a replica takes two nodes.
        lost = int(holders[1][4:]) - 1
        left = [n for i, n in enumerate(nodes) if i != lost]
        cap_mb = os.path.getsize(a.model) // 1000000
        serve_out = os.path.join(work, "replicas.out")
        with open(serve_out, "w") as log:
            procs["serve"] = subprocess.Popen(
                [a.cli, "pool", "serve", "--nodes", ",".join(left), "--config-dir", cli_dir,
                 "-m", a.model, "--ctx", "512", "--max-device-memory-mb", str(cap_mb),
                 "--parallel", "2", "--replicas", "2", "--api-port", "0", "-v"],
                stdout=log, stderr=subprocess.STDOUT)
        api_line = r"\[pool: (replica 1: .*); 4 replies at once\] API on http://127\.0\.0\.1:(\d+)/v1"
        m = wait_for_line(serve_out, api_line, "the API line with two replicas", procs["serve"],
                          timeout=180)
        replicas, port = m.group(1), int(m.group(2))
        if "replica 2: " not in replicas:
            fail(f"expected two replicas, got: {replicas}")
        questions = QUESTIONS + [q + " Answer briefly." for q in QUESTIONS]
        solo = [stream_chat(port, q, 24) for q in questions]
        together = concurrently(port, 24, questions=questions)
        for q, s, t in zip(questions, solo, together):
            if s != t:
                fail(f"{q!r} over two replicas: alone {s!r}, with the others {t!r}")
        status, health = get_json(port, "/health")
        served = [r.get("completed", 0) for r in health.get("replicas", [])]
        if status != 200 or len(served) != 2 or min(served) == 0:
            fail(f"/health should show two replicas that both served: {status} {health}")
        print(f"ok: pool API over {pipeline}; four streams equal their solo runs, also across "
              f"the loss of {holders[1]}; eight over two replicas ({replicas}), "
              f"requests completed per replica {served}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
