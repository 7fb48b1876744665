#!/usr/bin/env python3
"""The Vulkan backend against the CPU backend on one machine, as JSON.

    python3 bench/vulkan_vs_cpu.py [--build DIR] [--model GGUF] [--threads N] [--runs R]
                                   [-p N] [-n N] [--device ID]

Alternates `shoal-cli bench --backend cpu` and `--backend vulkan` (same model, prompt and
generation lengths, thread count) `--runs` times and reports each side's median prefill and
decode tokens/s, the median of the per-pair Vulkan/CPU ratios, and one `--profile` run of the
Vulkan side (GPU time per kernel, weight bytes read per token against what a token must read).

On lavapipe (Mesa's Vulkan on the CPU, what CI has) the ratios are a smoke figure: lavapipe is no
GPU, and both sides share the same cores. The figures that matter come from a GPU
(tests/gpu/run_on_device.sh).
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench(cli, backend, args, profile=False):
    cmd = [str(cli), "bench", "--backend", backend, "-m", args.model, "--threads",
           str(args.threads), "-p", str(args.prompt), "-n", str(args.gen), "-r", "1"]
    if backend == "vulkan" and args.device:
        cmd += ["--device", args.device]
    if profile:
        cmd.append("--profile")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def rates(report):
    return {r["test"][:2]: r["tokens_per_s_median"] for r in report["results"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-p", "--prompt", type=int, default=64)
    ap.add_argument("-n", "--gen", type=int, default=16)
    ap.add_argument("--device", default="", help="Vulkan device id (default: the best one)")
    args = ap.parse_args()
    cli = Path(args.build) / "app" / "cli" / "shoal-cli"
    if not cli.exists():
        sys.exit(f"vulkan_vs_cpu: {cli} not built (cmake --build {args.build} --target shoal-cli)")

    sides = {"cpu": [], "vulkan": []}
    device = ""
    for run in range(args.runs):
        # Alternate which side goes first, so neither always runs on a warmer machine.
        order = ["cpu", "vulkan"] if run % 2 == 0 else ["vulkan", "cpu"]
        for backend in order:
            report = bench(cli, backend, args)
            sides[backend].append(rates(report))
            if backend == "vulkan":
                device = report["device"]
    profile = bench(cli, "vulkan", args, profile=True)["profile"]

    def median(side, test):
        return statistics.median(r[test] for r in sides[side])

    result = {
        "model": Path(args.model).name,
        "threads": args.threads,
        "runs": args.runs,
        "vulkan_device": device,
        "note": "lavapipe runs on the CPU: a smoke figure, not a GPU's" if "llvmpipe" in device
        else "",
    }
    for test in ("pp", "tg"):
        ratios = [v[test] / c[test] for v, c in zip(sides["vulkan"], sides["cpu"])]
        result[test] = {
            "cpu_tokens_per_s_median": median("cpu", test),
            "vulkan_tokens_per_s_median": median("vulkan", test),
            "vulkan_over_cpu_median_ratio": statistics.median(ratios),
        }
    result["vulkan_profile"] = {
        "gpu_us_per_token": profile["gpu_us_per_token"],
        "weight_read_ratio": profile["weight_read_ratio"],
        "top_kernels": [{k: row[k] for k in ("kernel", "share", "dispatches_per_token")}
                        for row in profile["kernels"][:5]],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
