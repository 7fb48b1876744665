#!/usr/bin/env python3
"""Shoal vs llama.cpp on the same GGUF and thread count, run alternately, reported as ratios.

Measures, per pair of runs (Shoal, then llama.cpp):
  pp       prompt processing tokens/s (one batch of -p tokens into an empty cache)
  tg       generation tokens/s (-n single-token steps)
  rss      peak resident memory of a -n token greedy generation process
  startup  wall time of a 1-token generation process (load + first token)
and prints one JSON object: every sample, the median of each measure and the median of the
per-pair ratios Shoal/llama.cpp (for tokens/s higher is better; for rss and startup lower is).

The peer is llama.cpp's llama-bench and llama-completion built from the pinned sdist by
tools/llamacpp/build_llama_bench.sh. Weight repacking is off in the peer (it crashes on AMX CPUs
in this llama.cpp version, and it keeps the peer on the plain matmul path the fixtures use) and
flash attention is off, matching the fixtures. Standard library only.

Usage: bench/compare_llamacpp.py [--model M] [--threads 2] [--runs 5] [-p 128] [-n 64]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Once upon a time, in a small village by the sea, there lived"


def run_measured(cmd):
    """Runs cmd; returns (stdout, wall seconds, peak RSS bytes of that process)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"compare_llamacpp: command failed: {' '.join(map(str, cmd))}")
    return out, wall, usage.ru_maxrss * 1024


def shoal_bench(a):
    out, _, _ = run_measured([a.shoal, "bench", "-m", a.model, "--threads", str(a.threads),
                              "-p", str(a.p), "-n", str(a.n), "-r", "1"])
    res = {r["test"][:2]: r["tokens_per_s_median"] for r in json.loads(out)["results"]}
    return res["pp"], res["tg"]


def llama_bench(a):
    out, _, _ = run_measured([str(Path(a.llama_bin) / "llama-bench"), "-m", a.model, "-t",
                              str(a.threads), "-p", str(a.p), "-n", str(a.n), "-r", "1",
                              "--repack", "0", "-fa", "0", "-o", "json"])
    res = {}
    for r in json.loads(out):
        res["pp" if r["n_prompt"] else "tg"] = r["avg_ts"]
    return res["pp"], res["tg"]


def shoal_generate(a, n):
    return run_measured([a.shoal, "generate", "-m", a.model, "--threads", str(a.threads), "-p",
                         PROMPT, "-n", str(n), "--temp", "0", "--ignore-eos", "--ctx", "512"])


def llama_generate(a, n):
    return run_measured([str(Path(a.llama_bin) / "llama-completion"), "-m", a.model, "-t",
                         str(a.threads), "-p", PROMPT, "-n", str(n), "--temp", "0",
                         "--ignore-eos", "-c", "512", "--no-repack", "-fa", "off", "-no-cnv",
                         "--no-warmup"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--shoal", default=str(ROOT / "build/app/cli/shoal-cli"))
    ap.add_argument("--llama-bin", default=None,
                    help="llama.cpp build/bin (default: built by tools/llamacpp/build_llama_bench.sh)")
    a = ap.parse_args()
    if a.llama_bin is None:
        a.llama_bin = subprocess.run([str(ROOT / "tools/llamacpp/build_llama_bench.sh")],
                                     check=True, capture_output=True, text=True).stdout.strip()

    samples = {k: {"shoal": [], "llama.cpp": []} for k in ("pp", "tg", "rss", "startup")}
    ratios = {k: [] for k in samples}
    for _ in range(a.runs):
        s_pp, s_tg = shoal_bench(a)
        l_pp, l_tg = llama_bench(a)
        _, _, s_rss = shoal_generate(a, a.n)
        _, _, l_rss = llama_generate(a, a.n)
        _, s_start, _ = shoal_generate(a, 1)
        _, l_start, _ = llama_generate(a, 1)
        for key, s, l in (("pp", s_pp, l_pp), ("tg", s_tg, l_tg), ("rss", s_rss, l_rss),
                          ("startup", s_start, l_start)):
            samples[key]["shoal"].append(s)
            samples[key]["llama.cpp"].append(l)
            ratios[key].append(s / l)

    report = {
        "model": Path(a.model).name,
        "threads": a.threads,
        "runs": a.runs,
        "pp_tokens": a.p,
        "tg_tokens": a.n,
        "units": {"pp": "tokens/s", "tg": "tokens/s", "rss": "bytes", "startup": "s"},
        "median": {k: {who: statistics.median(v) for who, v in samples[k].items()} for k in samples},
        "median_ratio_shoal_over_llamacpp": {k: statistics.median(v) for k, v in ratios.items()},
        "samples": samples,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
