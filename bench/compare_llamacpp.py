#!/usr/bin/env python3
"""Shoal vs llama.cpp on the same GGUF and thread count, run alternately, reported as ratios.

Measures, per pair of runs (Shoal, then llama.cpp):
  pp       prompt processing tokens/s (one batch of -p tokens into an empty cache)
  tg       generation tokens/s (-n single-token steps)
  rss      peak resident memory of a -n token greedy generation process
  startup  wall time of a 1-token generation process (load + first token)
  generate wall time of the -n token generation process (load, prompt, -n tokens: what a user
           waits for a short reply, background work after the load included)
and prints one JSON object: every sample, the median of each measure and the median of the
per-pair ratios Shoal/llama.cpp (for tokens/s higher is better; for rss, startup and generate
lower is).

The peer is llama.cpp's llama-bench and llama-completion built from the pinned sdist by
tools/llamacpp/build_llama_bench.sh, at its defaults: weight repacking on, what its users run.
On AMX CPUs this llama.cpp crashes with it (a SIGSEGV in ggml_backend_amx_mul_mat, llama.cpp
issue #20824), so the default --peer-repack auto first runs one short llama-bench with repacking
on and, if that fails, compares against repacking off; the report's "peer" and "peer_probe" say
which ran and why. --peer-repack 1 insists on repacking (and stops if it crashes);
--peer-repack 0 measures the plain matmul path (no extra buffer types). The fixtures and the
CPU backend's bit-identity refer to the default, repacking on, on an x86 CPU with AVX-512 (Shoal
follows llama.cpp's repacked kernels for Q4_0, Q4_K, Q2_K, IQ4_NL and MXFP4: DotOrder::Repacked
and RepackedGemm; its repacking changes nothing for the other types on x86). Flash attention is
off in both, as in the fixtures. Standard library only.

The model is the default one, --model M, --synthetic a3b-moe|a3b-dense|gpt-oss-4l (a Qwen3-30B-A3B-shaped
mixture of experts cut to 8 layers, or the same with a dense FFN of its active width: see
SYNTHETIC_SHAPES), or --synthetic-1b TYPE: a random-weight model of
Llama-3.2-1B's shape (hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, tied output) with
SmolLM2's tokenizer copied in so llama.cpp loads it, written by shoal-synth-model into
<build>/models/ on first use (never committed). TYPE is q4_0, q8_0, q4_K, q5_K, q6_K, q2_K,
q3_K, iq4_xs, iq4_nl, mxfp4 (these five with a Q6_K embedding/output) or q4_K_m, a Q4_K_M-style mix (Q4_K matrices, attn_v and ffn_down Q6_K in every layer, the tied
embedding/output Q6_K; llama.cpp's Q4_K_M gives Q6_K to half of the attn_v/ffn_down layers).

Roofline: the bytes one decode step reads (every weight tensor, token_embd only when it is also
the output, of stacked experts only the routed top-k share) times tg tokens/s, over the DRAM read
bandwidth shoal_membw measures with the same thread count (or --bandwidth-gibs). shoal_membw
runs once per run, just before the run's tg measures, and each run's fractions use that run's
bandwidth; the report gives the medians of the per-run fractions, and each run's beside its
bandwidth. Why per run: on the 2-core EPYC VM the 2-thread bandwidth switched between about 30
and 53-62 GiB/s from one minute to the next (1 thread: 23-29), so a single measurement at the
start could be either. In a fast minute two cores cannot consume it: every decode there,
llama.cpp's too, reached about half of it (0.35-0.59 in the 2026-12-07 sets), against
0.71-0.99 (Shoal) and 0.59-0.94 (llama.cpp) in a slow one; a set's median depends on how many
fast minutes it met.
It is a DRAM figure only for models much larger than the last-level cache; a model that fits in
it (SmolLM2-135M in a 480 MiB L3) can exceed 1.

--level avx2 compares at the AVX2 level on an AVX-512 machine: Shoal with SHOAL_CPU_ISA=avx2,
llama.cpp built for AVX2/FMA/F16C/BMI2 only (SHOAL_LLAMACPP_LEVEL=avx2 of the build script), which
is what both run on an AVX2-only CPU (Zen 2/3, Intel client cores). The default, native, is each
at its best for this CPU.

Usage: bench/compare_llamacpp.py [--build build] [--model M | --synthetic-1b TYPE]
                                 [--peer-repack auto|1|0] [--threads 2] [--runs 5] [-p 128]
                                 [-n 64] [--bandwidth-gibs B] [--level native|avx2]
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Once upon a time, in a small village by the sea, there lived"
DEFAULT_MODEL = ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
# Llama-3.2-1B's shape (its config.json: hidden_size 2048, num_hidden_layers 16,
# num_attention_heads 32, num_key_value_heads 8, intermediate_size 8192, rope_theta 500000,
# tie_word_embeddings true); the vocabulary is SmolLM2's (49152 tokens), not Llama 3's.
SYNTHETIC_1B = ["--layers", "16", "--embd", "2048", "--heads", "32", "--kv-heads", "8",
                "--ff", "8192", "--rope-base", "500000", "--tied"]


SYNTHETIC_TYPES = {
    "q4_0": ["--type", "q4_0"],
    "q8_0": ["--type", "q8_0"],
    "q4_K": ["--type", "q4_K"],
    "q5_K": ["--type", "q5_K"],
    "q6_K": ["--type", "q6_K"],
    "q4_K_m": ["--type", "q4_K", "--embed-type", "q6_K", "--type-of", "attn_v=q6_K",
               "--type-of", "ffn_down=q6_K"],
    # the low-bit and i-quant types with a Q6_K embedding/output, as llama.cpp's mixes of them
    "q2_K": ["--type", "q2_K", "--embed-type", "q6_K"],
    "q3_K": ["--type", "q3_K", "--embed-type", "q6_K"],
    "iq4_xs": ["--type", "iq4_xs", "--embed-type", "q6_K"],
    "iq4_nl": ["--type", "iq4_nl", "--embed-type", "q6_K"],
    # gpt-oss's expert type on every matrix of a dense model (its attention and embedding are
    # not MXFP4 in the real files; here the point is the MXFP4 kernels)
    "mxfp4": ["--type", "mxfp4", "--embed-type", "q6_K"],
}


# Qwen3-30B-A3B's routing and widths (config.json: hidden_size 2048, num_experts 128,
# num_experts_per_tok 8, moe_intermediate_size 768, 4 KV heads), scaled to fit a small machine:
# 8 of its 48 layers, and 16 heads of 128 (it has 32 query heads of 128, a wider Q than the
# writer makes). "a3b-dense" is the same model with one dense FFN as wide as the 8 active
# experts together (8 x 768), so both read the same weight bytes per token.
SYNTHETIC_A3B = ["--layers", "8", "--embd", "2048", "--heads", "16", "--kv-heads", "4",
                 "--rope-base", "1000000", "--type", "q4_K", "--embed-type", "q6_K"]
SYNTHETIC_SHAPES = {
    "a3b-moe": ["--arch", "qwen3moe", *SYNTHETIC_A3B, "--ff", "6144", "--experts", "128",
                "--experts-used", "8", "--ff-expert", "768"],
    "a3b-dense": ["--arch", "qwen3", *SYNTHETIC_A3B, "--ff", "6144"],
    # gpt-oss-20b's MoE (hidden 2880, 32 experts of width 2880, top 4, MXFP4 experts, Q8_0
    # attention, sliding window 128 on even layers, YaRN x32) cut to 4 of its 24 layers, with 45
    # query heads of 64 (5 KV heads) for its 64 (8): the writer makes Q as wide as the hidden size.
    "gpt-oss-4l": ["--arch", "gpt-oss", "--layers", "4", "--embd", "2880", "--heads", "45",
                   "--kv-heads", "5", "--ff", "2880", "--experts", "32", "--experts-used", "4",
                   "--ff-expert", "2880", "--type", "q8_0", "--type-of", "ffn_gate_exps=mxfp4",
                   "--type-of", "ffn_up_exps=mxfp4", "--type-of", "ffn_down_exps=mxfp4",
                   "--sliding-window", "128", "--rope-scaling", "yarn", "--rope-scale", "32",
                   "--rope-orig-ctx", "4096", "--rope-base", "150000"],
}


def write_synthetic(a, name, args):
    """Path of <build>/models/<name>.gguf, written by shoal-synth-model on first use."""
    out = Path(a.build) / "models" / f"{name}.gguf"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tool = Path(a.build) / "tools/shoal-synth-model"
        subprocess.run([str(tool), *args, "--vocab-from", str(DEFAULT_MODEL), "--name", name,
                        "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


def synthetic_1b(a, qtype):
    """Path of the synthetic 1B model of type qtype, written on first use."""
    return write_synthetic(a, f"synthetic-llama-3.2-1b-{qtype}",
                           [*SYNTHETIC_1B, *SYNTHETIC_TYPES[qtype]])


def gguf_tensor_bytes(path, meta=None):
    """{tensor name: bytes in the file} from a GGUF v2/v3 header (each tensor's size is the gap
    to the next tensor's offset, the last one's to the end of the file; padding <= alignment).
    When meta is a dict, the scalar metadata values are stored in it by key."""
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
              12: "d"}
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # the header of every model used here fits
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return vals[0]

    def skip(n):
        nonlocal pos
        pos += n

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n:pos].decode("utf-8", "replace")

    def value(vtype):
        if vtype in scalar:
            return take(scalar[vtype])
        if vtype == 8:
            return string()
        if vtype == 9:
            etype, count = take("I"), take("Q")
            if etype in scalar:  # skip a numeric array without unpacking it
                skip(struct.calcsize("<" + scalar[etype]) * count)
                return None
            return [value(etype) for _ in range(count)]
        raise ValueError(f"{path}: unknown GGUF value type {vtype} at byte {pos}")

    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version} not supported here")
    alignment = 32
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key == "general.alignment":
            alignment = v
        if meta is not None and not isinstance(v, list):
            meta[key] = v
    infos = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take("I")
        pos += 8 * n_dims
        take("I")  # type
        infos.append((take("Q"), name))
    data_start = (pos + alignment - 1) // alignment * alignment
    infos.sort()
    end = os.path.getsize(path) - data_start
    sizes = {}
    for i, (offset, name) in enumerate(infos):
        sizes[name] = (infos[i + 1][0] if i + 1 < len(infos) else end) - offset
    return sizes


def decode_bytes_per_token(path):
    """Weight bytes one decode step reads: all tensors, but of token_embd only one row unless it
    is also the output matrix (no output.weight), and of each stacked expert tensor (*_exps)
    only the expert_used_count of expert_count experts a token is routed to."""
    meta = {}
    sizes = gguf_tensor_bytes(path, meta)
    arch = meta.get("general.architecture", "")
    experts = meta.get(f"{arch}.expert_count", 0)
    used = meta.get(f"{arch}.expert_used_count", 0)
    total = 0
    for name, size in sizes.items():
        total += size * used / experts if experts and "_exps." in name else size
    if "output.weight" in sizes and "token_embd.weight" in sizes:
        total -= sizes["token_embd.weight"]
    return int(total)


def membw(a):
    """DRAM read bandwidth in bytes/s with a.threads threads (shoal_membw's median)."""
    if a.bandwidth_gibs:
        return {"source": "--bandwidth-gibs", "gib_per_s_median": a.bandwidth_gibs,
                "bytes_per_s_median": a.bandwidth_gibs * (1 << 30)}
    out = subprocess.run([str(Path(a.build) / "bench/membw/shoal_membw"), "--threads",
                          str(a.threads)], check=True, capture_output=True, text=True).stdout
    res = json.loads(out)
    res["source"] = "shoal_membw"
    return res


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


def probe_peer_repack(a):
    """(works, why): whether a short llama-bench with weight repacking on exits cleanly."""
    cmd = [str(Path(a.llama_bin) / "llama-bench"), "-m", a.model, "-t", str(a.threads), "-p", "16",
           "-n", "2", "-r", "1", "--repack", "1", "-fa", "0", "-o", "json"]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if proc.returncode == 0:
        return True, "llama-bench --repack 1 ran: repacking on"
    how = (f"was killed by signal {-proc.returncode}" if proc.returncode < 0
           else f"exited with {proc.returncode}")
    return False, f"llama-bench --repack 1 {how}: repacking off instead"


def shoal_bench(a):
    out, _, _ = run_measured([a.shoal, "bench", "-m", a.model, "--threads", str(a.threads),
                              "-p", str(a.p), "-n", str(a.n), "-r", "1"])
    res = {r["test"][:2]: r["tokens_per_s_median"] for r in json.loads(out)["results"]}
    return res["pp"], res["tg"]


def llama_bench(a):
    out, _, _ = run_measured([str(Path(a.llama_bin) / "llama-bench"), "-m", a.model, "-t",
                              str(a.threads), "-p", str(a.p), "-n", str(a.n), "-r", "1",
                              "--repack", str(a.peer_repack), "-fa", "0", "-o", "json"])
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
                         "--ignore-eos", "-c", "512", *(["--no-repack"] if a.peer_repack == 0 else []),
                         "-fa", "off", "-no-cnv", "--no-warmup"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"),
                    help="build directory holding shoal-cli, shoal-synth-model and shoal_membw")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--model", default=None, help="GGUF model (default: the default model)")
    which.add_argument("--synthetic-1b", choices=sorted(SYNTHETIC_TYPES), default=None,
                       help="a random-weight Llama-3.2-1B-shaped model of this type")
    which.add_argument("--synthetic", choices=sorted(SYNTHETIC_SHAPES), default=None,
                       help="a3b-moe: a Qwen3-30B-A3B-shaped MoE (8 layers); a3b-dense: the same "
                            "with a dense FFN of the active experts' width")
    ap.add_argument("--bandwidth-gibs", type=float, default=None,
                    help="DRAM read bandwidth for the roofline (default: run shoal_membw)")
    ap.add_argument("--peer-repack", choices=["auto", "1", "0"], default="auto",
                    help="llama.cpp's weight repacking: auto (on, its default, unless that "
                         "crashes), 1, or 0 (the fixtures' path)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--shoal", default=None, help="shoal-cli (default: <build>/app/cli/shoal-cli)")
    ap.add_argument("--level", choices=["native", "avx2"], default="native",
                    help="x86 SIMD level of both: native (each at its best here) or avx2 (as on "
                         "an AVX2-only CPU)")
    ap.add_argument("--llama-bin", default=None,
                    help="llama.cpp build/bin (default: built by tools/llamacpp/build_llama_bench.sh)")
    a = ap.parse_args()
    if a.shoal is None:
        a.shoal = str(Path(a.build) / "app/cli/shoal-cli")
    if a.synthetic_1b:
        a.model = str(synthetic_1b(a, a.synthetic_1b))
    elif a.synthetic:
        a.model = str(write_synthetic(a, f"synthetic-{a.synthetic}", SYNTHETIC_SHAPES[a.synthetic]))
    elif a.model is None:
        a.model = str(DEFAULT_MODEL)
    if a.llama_bin is None:
        a.llama_bin = subprocess.run([str(ROOT / "tools/llamacpp/build_llama_bench.sh")],
                                     check=True, capture_output=True, text=True,
                                     env={**os.environ, "SHOAL_LLAMACPP_LEVEL": a.level}
                                     ).stdout.strip()
    if a.level == "avx2":
        os.environ["SHOAL_CPU_ISA"] = "avx2"  # every shoal-cli run below inherits it

    if a.peer_repack == "auto":
        works, probe = probe_peer_repack(a)
        a.peer_repack = 1 if works else 0
    else:
        probe = f"--peer-repack {a.peer_repack} given"
        a.peer_repack = int(a.peer_repack)

    load_start = Path("/proc/loadavg").read_text().split()[:3]
    samples = {k: {"shoal": [], "llama.cpp": []}
               for k in ("pp", "tg", "rss", "startup", "generate")}
    ratios = {k: [] for k in samples}
    bandwidths = []  # per run: shoal_membw just before its tg measures
    for _ in range(a.runs):
        bandwidths.append(membw(a))
        s_pp, s_tg = shoal_bench(a)
        l_pp, l_tg = llama_bench(a)
        _, s_gen, s_rss = shoal_generate(a, a.n)
        _, l_gen, l_rss = llama_generate(a, a.n)
        _, s_start, _ = shoal_generate(a, 1)
        _, l_start, _ = llama_generate(a, 1)
        for key, s, l in (("pp", s_pp, l_pp), ("tg", s_tg, l_tg), ("rss", s_rss, l_rss),
                          ("startup", s_start, l_start), ("generate", s_gen, l_gen)):
            samples[key]["shoal"].append(s)
            samples[key]["llama.cpp"].append(l)
            ratios[key].append(s / l)

    median = {k: {who: statistics.median(v) for who, v in samples[k].items()} for k in samples}
    step_bytes = decode_bytes_per_token(a.model)
    per_run = {who: [step_bytes * tg / b["bytes_per_s_median"]
                     for tg, b in zip(samples["tg"][who], bandwidths)]
               for who in ("shoal", "llama.cpp")}
    fractions = {who: statistics.median(v) for who, v in per_run.items()}
    report = {
        "model": Path(a.model).name,
        "model_file_bytes": os.path.getsize(a.model),
        # 1/5/15-minute load averages: timings taken on a busy machine are not figures
        "loadavg_start": load_start,
        "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
        "peer": f"llama.cpp (llama-cpp-python 0.3.36), repack {'on' if a.peer_repack else 'off'}, "
                "flash attention off",
        "peer_probe": probe,
        "level": a.level,
        "threads": a.threads,
        "runs": a.runs,
        "pp_tokens": a.p,
        "tg_tokens": a.n,
        "units": {"pp": "tokens/s", "tg": "tokens/s", "rss": "bytes", "startup": "s",
                  "generate": "s"},
        "median": median,
        "median_ratio_shoal_over_llamacpp": {k: statistics.median(v) for k, v in ratios.items()},
        "roofline": {
            "decode_bytes_per_token": step_bytes,
            "dram_read_gib_per_s": statistics.median(b["gib_per_s_median"] for b in bandwidths),
            "dram_read_gib_per_s_per_run": [b["gib_per_s_median"] for b in bandwidths],
            "bandwidth_source": bandwidths[0]["source"],
            # the median over runs of the fraction of that run's DRAM bandwidth tg streams
            # weights at
            "fraction_of_dram_bandwidth": fractions,
            # each run's, beside its bandwidth above: in a minute of fast memory (50+ GiB/s on
            # the dev VM) every decode, llama.cpp's too, is bound by its cores instead
            "fraction_of_dram_bandwidth_per_run": per_run,
        },
        "samples": samples,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
