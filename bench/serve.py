#!/usr/bin/env python3
"""Serving load: N concurrent streaming clients against shoal-node's OpenAI-compatible API and
against llama.cpp's llama-server (continuous batching, -np slots) on the same GGUF and threads,
alternated level by level in one run. Prints JSON.

    bench/serve.py [--build build] [--model M | --synthetic-1b q4_0] [--threads 2]
                   [--levels 1,2,4,8,16] [--requests 2] [--rounds 1] [--load qa|chat]

Load: at concurrency c, c clients each send --requests streamed /v1/completions back to back
(temperature 0, ignore_eos, so every reply has exactly its max_tokens). Prompts and lengths come
from a seeded generator (--seed): a prompt is a numbered passage of U(--prompt-min, --prompt-max)
words (the number first, so no server can reuse another request's prompt prefix), max_tokens is
U(--gen-min, --gen-max). Every level and round draws the same requests for both servers. Two
named loads set those four bounds (each can still be given): "qa" (the default) prompts of
U(20, 120) words and replies of U(32, 96) tokens, short answers to longer questions, where
evaluating the prompts is about half the wall time at 8 clients on a CPU; "chat" prompts of
U(10, 30) words and replies of U(128, 256) tokens, a conversation's turns, where the decode steps
(memory-bound, one read of the weights per batch) take most of it.

Per level and server: aggregate tokens/s (completion tokens of all requests / wall time from the
first send to the last reply: prompt evaluation included), decode tokens/s (the clients' decode
rates added up: each client's tokens after each reply's first over the time from that first text
event to the reply's last, so stalls for other clients' prompts count and a reply's own prompt
does not), time to first token (send to first text event) p50/p99, inter-token latency (gaps
between text events, each event carrying one token or a few) p50/p99; then shoal / llama-server
ratios of both throughputs, and each server's at each level over its own single-stream figures.

Both servers get slots for the largest level, each slot a context of --ctx tokens: shoal-node
--parallel L --ctx C; llama-server -np L -c L*C (llama.cpp divides -c among its slots). llama-server
otherwise runs at its defaults, which are its best on a CPU: weight repacking on, continuous
batching on, flash attention "auto". Stdlib only (http.client).
"""

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_llamacpp import DEFAULT_MODEL, ROOT, SYNTHETIC_TYPES, synthetic_1b  # noqa: E402
from sse import sse_json_events  # noqa: E402

# Named loads: bounds of the prompts' words and the replies' tokens (module docstring).
LOADS = {
    "qa": {"prompt_min": 20, "prompt_max": 120, "gen_min": 32, "gen_max": 96},
    "chat": {"prompt_min": 10, "prompt_max": 30, "gen_min": 128, "gen_max": 256},
}

WORDS = ("the river runs past the old mill and under the stone bridge where children stop to "
         "watch the fish that gather in the shade in autumn the leaves fall into the water and "
         "drift toward the sea carrying the colours of the hills with them").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process on a free loopback port, answering /health."""

    def __init__(self, name, cmd_for_port, log_dir):
        self.name = name
        self.port = free_port()
        self.log = open(Path(log_dir) / f"serve-{name}-{self.port}.log", "w+")
        self.proc = subprocess.Popen(cmd_for_port(self.port), stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                sys.exit(f"{name} exited with {self.proc.returncode}: {self.log.read()[-2000:]}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit(f"{name} did not become healthy within 300 s")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def streamed(port, prompt, max_tokens):
    """One streamed completion: (ttft, gaps between text events, completion tokens, wall, decode
    seconds: from the first text event to the last)."""
    body = json.dumps({"model": "default", "prompt": prompt, "max_tokens": max_tokens,
                       "stream": True, "temperature": 0, "ignore_eos": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"answered {r.status}: {r.read()[:300]!r}")
    events, usage, finish = [], None, None
    for j in sse_json_events(r):
        if j.get("usage"):
            usage = j["usage"]
        for ch in j.get("choices", []):
            if ch.get("text"):
                events.append(time.perf_counter())
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    end = time.perf_counter()
    c.close()
    if not events:
        raise RuntimeError("the stream carried no text")
    if finish != "length":
        raise RuntimeError(f"finish_reason {finish!r}, expected 'length' (ignore_eos)")
    tokens = usage["completion_tokens"] if usage else max_tokens
    gaps = [b - a for a, b in zip(events, events[1:])]
    return events[0] - t0, gaps, tokens, end - t0, events[-1] - events[0]


def draw_requests(seed, level, per_client, a):
    rng = random.Random(f"{seed}-{level}")
    out = []
    for client in range(level):
        mine = []
        for k in range(per_client):
            n = rng.randint(a.prompt_min, a.prompt_max)
            words = [rng.choice(WORDS) for _ in range(n)]
            mine.append((f"{client * per_client + k + 1}. " + " ".join(words),
                         rng.randint(a.gen_min, a.gen_max)))
        out.append(mine)
    return out


def run_level(server, requests):
    ttfts, gaps, tokens, errors = [], [], [0], []
    decode_rates = []  # per client: tokens after the first / seconds from first to last event
    lock = threading.Lock()

    def client(mine):
        after_first, decode_s = 0, 0.0
        for prompt, n in mine:
            try:
                ttft, g, t, _, d = streamed(server.port, prompt, n)
            except Exception as e:  # noqa: BLE001 - reported with the result
                with lock:
                    errors.append(repr(e))
                continue
            after_first += t - 1
            decode_s += d
            with lock:
                ttfts.append(ttft)
                gaps.extend(g)
                tokens[0] += t
        if decode_s > 0:
            with lock:
                decode_rates.append(after_first / decode_s)

    threads = [threading.Thread(target=client, args=(mine,)) for mine in requests]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit(f"{server.name}: {len(errors)} request(s) failed: {errors[:3]}")

    def pct(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else None

    # decode_tokens_per_s: the clients' decode rates added up, each the tokens it received after
    # each reply's first over the time from that first text event to the reply's last; stalls
    # while other clients' prompts are evaluated count, prompt evaluation before a reply's first
    # token does not (that is TTFT).
    return {"aggregate_tokens_per_s": tokens[0] / wall,
            "decode_tokens_per_s": sum(decode_rates), "completion_tokens": tokens[0],
            "wall_s": wall, "requests": len(ttfts),
            "ttft_s_p50": pct(ttfts, 50), "ttft_s_p99": pct(ttfts, 99),
            "itl_s_p50": pct(gaps, 50), "itl_s_p99": pct(gaps, 99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--model", default=None, help="GGUF (default: the default model)")
    which.add_argument("--synthetic-1b", choices=sorted(SYNTHETIC_TYPES), default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", default="1,2,4,8,16")
    ap.add_argument("--requests", type=int, default=2, help="requests per client per level")
    ap.add_argument("--rounds", type=int, default=1, help="alternations of the two servers")
    ap.add_argument("--ctx", type=int, default=512, help="context per slot")
    ap.add_argument("--load", choices=sorted(LOADS), default="qa",
                    help="named bounds for the four below (module docstring)")
    ap.add_argument("--prompt-min", type=int, default=None)
    ap.add_argument("--prompt-max", type=int, default=None)
    ap.add_argument("--gen-min", type=int, default=None)
    ap.add_argument("--gen-max", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--llama-bin", default=None,
                    help="llama.cpp build/bin (default: built by tools/llamacpp/build_llama_bench.sh)")
    ap.add_argument("--no-peer", action="store_true", help="measure Shoal alone")
    ap.add_argument("--backend", default="cpu",
                    help="shoal-node's backend for the model (cpu, vulkan, cuda; with --no-peer "
                         "for a GPU backend: llama-server runs on the CPU)")
    a = ap.parse_args()
    for key, value in LOADS[a.load].items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    # The JSON names the load only where its bounds are the named ones.
    load_name = a.load if {k: getattr(a, k) for k in LOADS[a.load]} == LOADS[a.load] else "custom"
    if not 1 <= a.prompt_min <= a.prompt_max or not 1 <= a.gen_min <= a.gen_max:
        ap.error("need 1 <= --prompt-min <= --prompt-max and 1 <= --gen-min <= --gen-max")
    levels = [int(x) for x in a.levels.split(",")]
    slots = max(levels)
    if a.synthetic_1b:
        model = str(synthetic_1b(a, a.synthetic_1b))
    else:
        model = str(Path(a.model) if a.model else DEFAULT_MODEL)
    if not a.no_peer and not a.llama_bin:
        a.llama_bin = subprocess.run([str(ROOT / "tools/llamacpp/build_llama_bench.sh")],
                                     capture_output=True, text=True, check=True).stdout.strip()
    logs = Path(os.environ.get("TMPDIR", "/tmp"))

    node = str(Path(a.build) / "app/node/shoal-node")
    shoal_cmd = lambda port: [node, "-m", model, "--no-pool", "--api-port", str(port),  # noqa: E731
                              "--threads", str(a.threads), "--parallel", str(slots),
                              "--ctx", str(a.ctx), "--max-queue", "48", "--backend", a.backend]
    llama_cmd = lambda port: [str(Path(a.llama_bin) / "llama-server"), "-m", model,  # noqa: E731
                              "--host", "127.0.0.1", "--port", str(port),
                              "-t", str(a.threads), "-tb", str(a.threads), "-np", str(slots),
                              "-c", str(slots * a.ctx)]
    servers = {"shoal": shoal_cmd}
    if not a.no_peer:
        servers["llama_server"] = llama_cmd

    results = {name: {lvl: [] for lvl in levels} for name in servers}
    running = {name: Server(name, cmd, logs) for name, cmd in servers.items()}
    try:
        for s in running.values():  # first touch of the weights and buffers
            run_level(s, draw_requests(a.seed + 999, 1, 1, a))
        for rnd in range(a.rounds):
            for i, lvl in enumerate(levels):
                order = list(running)
                if (rnd + i) % 2:
                    order.reverse()
                reqs = draw_requests(a.seed + rnd, lvl, a.requests, a)
                for name in order:
                    results[name][lvl].append(run_level(running[name], reqs))
    finally:
        for s in running.values():
            s.stop()

    def median_of(runs, key):
        return statistics.median(r[key] for r in runs)

    out = {"model": os.path.basename(model), "backend": a.backend, "threads": a.threads,
           "levels": levels,
           "requests_per_client": a.requests, "rounds": a.rounds, "ctx_per_slot": a.ctx,
           "slots": slots,
           "load": {"name": load_name, "prompt_words": [a.prompt_min, a.prompt_max],
                    "max_tokens": [a.gen_min, a.gen_max], "seed": a.seed,
                    "distribution": "uniform, integers, inclusive"},
           "peer_flags": None if a.no_peer else llama_cmd(0)[3:],
           "per_level": []}
    keys = ["aggregate_tokens_per_s", "decode_tokens_per_s", "ttft_s_p50", "ttft_s_p99",
            "itl_s_p50", "itl_s_p99"]
    single = median_of(results["shoal"][levels[0]], "aggregate_tokens_per_s")
    single_decode = median_of(results["shoal"][levels[0]], "decode_tokens_per_s")
    peer_single = (None if a.no_peer else
                   median_of(results["llama_server"][levels[0]], "aggregate_tokens_per_s"))
    for lvl in levels:
        row = {"concurrency": lvl}
        for name in servers:
            row[name] = {k: median_of(results[name][lvl], k) for k in keys}
            row[name]["runs"] = results[name][lvl]
        row["shoal_over_own_first_level"] = row["shoal"]["aggregate_tokens_per_s"] / single
        row["shoal_decode_over_own_first_level"] = (row["shoal"]["decode_tokens_per_s"] /
                                                    single_decode)
        if not a.no_peer:
            row["llama_server_over_own_first_level"] = (
                row["llama_server"]["aggregate_tokens_per_s"] / peer_single)
            row["ratio_aggregate_shoal_over_llama_server"] = (
                row["shoal"]["aggregate_tokens_per_s"] /
                row["llama_server"]["aggregate_tokens_per_s"])
            row["ratio_decode_shoal_over_llama_server"] = (
                row["shoal"]["decode_tokens_per_s"] / row["llama_server"]["decode_tokens_per_s"])
        out["per_level"].append(row)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
