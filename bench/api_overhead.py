#!/usr/bin/env python3
"""API overhead: time-to-first-token and streamed decode tokens/s through shoal-node's
OpenAI-compatible API, against `shoal-cli bench` on the same model and threads. Prints JSON.

    bench/api_overhead.py --build build --threads 4 [--model M] [--runs 5] [--prompt-words 100]

API side: streamed /v1/completions (temperature 0, ignore_eos, max_tokens = --gen), one request at
a time. Each run's prompt starts with a different number, so the server's prompt-prefix cache
cannot skip the prefill: the time to first token covers HTTP + tokenization + queueing + a full
prefill + the first sample + the first SSE event. Decode tokens/s = (completion tokens - 1) /
(time of last content event - time of first), with the token count from the usage chunk.

CLI side: `shoal-cli bench -p <the API prompt's token count> -n <gen>`: ppN and tgN from the
engine, no HTTP. The CLI's equivalent of a time to first token is N / pp + 1 / tg.

Stdlib only (http.client), so it needs no venv.
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sse import sse_json_events  # noqa: E402

PASSAGE = ("The river runs past the old mill and under the stone bridge, where children stop to "
           "watch the fish that gather in the shade. In autumn the leaves fall into the water and "
           "drift toward the sea, carrying the colours of the hills with them. ")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(port, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"shoal-node exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    sys.exit("shoal-node did not become healthy")


def streamed_run(port, prompt, gen):
    body = json.dumps({"model": "default", "prompt": prompt, "max_tokens": gen, "stream": True,
                       "temperature": 0, "ignore_eos": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"API answered {r.status}: {r.read()[:300]!r}")
    first = last = None
    usage = None
    for j in sse_json_events(r):
        if j.get("usage"):
            usage = j["usage"]
        for ch in j.get("choices", []):
            if ch.get("text"):
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
    c.close()
    if first is None or usage is None:
        sys.exit("the stream carried no text or no usage")
    n = usage["completion_tokens"]
    return {"ttft_s": first - t0,
            "decode_tokens_per_s": (n - 1) / (last - first) if n > 1 and last > first else 0.0,
            "prompt_tokens": usage["prompt_tokens"], "completion_tokens": n}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="build directory with app/node, app/cli")
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "models",
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for both (0: cores)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gen", type=int, default=64, help="tokens generated per run")
    ap.add_argument("--prompt-words", type=int, default=100, help="approximate prompt length")
    args = ap.parse_args()

    node_exe = os.path.join(args.build, "app", "node", "shoal-node")
    cli_exe = os.path.join(args.build, "app", "cli", "shoal-cli")
    model = os.path.realpath(args.model)
    words = (PASSAGE * (1 + args.prompt_words // len(PASSAGE.split()))).split()[:args.prompt_words]
    passage = " ".join(words)

    port = free_port()
    # --no-pool: the API alone (no pool listener, no discovery beacons); stdout carries the node's
    # start line, not this script's JSON.
    proc = subprocess.Popen([node_exe, "-m", model, "--api-port", str(port), "--threads",
                             str(args.threads), "--no-pool"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_health(port, proc)
        streamed_run(port, "Warm-up. " + passage, args.gen)  # first-touch of weights and cache
        runs = [streamed_run(port, f"{i + 1}. {passage}", args.gen) for i in range(args.runs)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    prompt_tokens = int(statistics.median(r["prompt_tokens"] for r in runs))
    cli = subprocess.run([cli_exe, "bench", "-m", model, "--threads", str(args.threads),
                          "-p", str(prompt_tokens), "-n", str(args.gen), "-r", str(args.runs)],
                         capture_output=True, text=True, check=True)
    bench = json.loads(cli.stdout)
    rates = {r["test"][:2]: r["tokens_per_s_median"] for r in bench["results"]}
    cli_ttft = prompt_tokens / rates["pp"] + 1.0 / rates["tg"]
    api_ttft = statistics.median(r["ttft_s"] for r in runs)
    api_tg = statistics.median(r["decode_tokens_per_s"] for r in runs)
    out = {
        "model": os.path.basename(model),
        "threads": args.threads,
        "runs": args.runs,
        "prompt_tokens": prompt_tokens,
        "gen_tokens": args.gen,
        "api": {"ttft_s_median": api_ttft, "decode_tokens_per_s_median": api_tg,
                "ttft_s": [r["ttft_s"] for r in runs],
                "decode_tokens_per_s": [r["decode_tokens_per_s"] for r in runs]},
        "cli_bench": {"pp_tokens_per_s_median": rates["pp"],
                      "tg_tokens_per_s_median": rates["tg"],
                      "ttft_s_equivalent": cli_ttft},
        "ratio": {"api_decode_over_cli_tg": api_tg / rates["tg"],
                  "api_ttft_over_cli_equivalent": api_ttft / cli_ttft},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
