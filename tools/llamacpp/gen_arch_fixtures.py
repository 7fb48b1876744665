#!/usr/bin/env python3
"""Generates tests/fixtures/llamacpp_arch.json: what llama.cpp (through the pinned
llama-cpp-python) computes on small synthetic models of each architecture Shoal loads beyond the
default model's llama, for the CPU backend's bit-identity tests (test_cpu_arch_parity).

Each model is written by Shoal's own writer (shoal-synth-model, deterministic for a spec) with
the default model's tokenizer copied in; the fixture records the spec, the file's sha256 (a test
whose writer output differs says so before comparing anything), and per prompt:

  prompt_ids     token ids (random, seeded: the parity is about the layers, not the tokenizer)
  tokens         64 greedy steps (argmax of the raw logits, ties to the lowest id)
  logits_fnv1a   per step, FNV-1a 64 of the whole logits row as little-endian float32 bytes
                 (step 0: after the prompt, evaluated as one batch): equal only if bit-identical
  top2_margin    logit(top1) - logit(top2) per step
  top            the 10 largest (id, logit) after the prompt, for diagnosis

Run with the venv made by venv.sh, after building shoal-synth-model:
  "$(tools/llamacpp/venv.sh)/bin/python" tools/llamacpp/gen_arch_fixtures.py \
      [--synth build/tools/shoal-synth-model] [--vocab-from models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""

import argparse
import hashlib
import json
import pathlib
import random
import subprocess
import sys
import tempfile

import numpy as np

import llama_cpp
from gen_fixtures import (DEFAULT_MODEL, FIXTURES, N_THREADS, PINNED_VERSION,
                          disable_extra_buffer_types, last_logits, load_llama, sha256_of, top2,
                          top_k)

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = FIXTURES / "llamacpp_arch.json"
N_CTX = 512
N_BATCH = 512
N_GREEDY_STEPS = 64
PROMPT_LENGTHS = (1, 7, 300)
PROMPT_SEED = 20261202

# The models: small (fast in CI) but with each architecture's real tensor names, metadata and
# routing, and types that take each of llama.cpp's product orders (Q8_0 vec_dot; K-quants tiled
# at 8+ rows per matrix or per expert, vec_dot below). Field names are SyntheticModelSpec's.
MODELS = [
    {"name": "qwen3-q8_0", "arch": "qwen3", "layers": 4, "embd": 256, "heads": 4, "kv_heads": 2,
     "ff": 512, "type": "q8_0", "seed": 31},
    {"name": "qwen3moe-8x2-q8_0", "arch": "qwen3moe", "layers": 4, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "experts": 8, "experts_used": 2, "ff_expert": 256, "type": "q8_0",
     "seed": 32},
    {"name": "qwen3moe-8x2-q4_K", "arch": "qwen3moe", "layers": 3, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "experts": 8, "experts_used": 2, "ff_expert": 256, "type": "q4_K",
     "type_of": {"ffn_down_exps": "q6_K", "attn_v": "q6_K"}, "repack": True, "seed": 33},
    # Qwen3-30B-A3B's routing (128 experts, top 8; the softmax over whole vectors of 16), scaled.
    {"name": "qwen3moe-128x8-q4_K", "arch": "qwen3moe", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 768, "experts": 128, "experts_used": 8, "ff_expert": 256,
     "type": "q4_K", "repack": True, "seed": 34},
    # YaRN RoPE (Qwen3's long-context setting: factor 4 over a 32k original context, here 128
    # so the positions of a 300-token prompt reach past it), on qwen3 (NeoX pairs) and on llama
    # (adjacent pairs, with an attention factor).
    {"name": "qwen3-yarn-q8_0", "arch": "qwen3", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "type": "q8_0", "rope_scaling": "yarn", "rope_scale": 4.0,
     "rope_orig_ctx": 128, "seed": 36},
    {"name": "llama-yarn-q8_0", "arch": "llama", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 4, "ff": 512, "type": "q8_0", "rope_scaling": "yarn", "rope_scale": 8.0,
     "rope_orig_ctx": 64, "seed": 37},
    # Gemma 3: scaled embedding, GeGLU, post norms, per-head Q/K norms, sliding-window layers
    # (window 48, pattern 3: layers 0 and 1 local with RoPE base 10000, layer 2 global with the
    # model's base) and a tied output.
    {"name": "gemma3-swa-q8_0", "arch": "gemma3", "layers": 3, "embd": 256, "heads": 4,
     "kv_heads": 1, "ff": 512, "type": "q8_0", "sliding_window": 48, "sliding_window_pattern": 3,
     "rope_base": 1000000.0, "tied": True, "seed": 38},
    # Phi-3: fused attn_qkv and gate/up matrices, queries scaled before attention.
    {"name": "phi3-q8_0", "arch": "phi3", "layers": 3, "embd": 256, "heads": 4, "kv_heads": 2,
     "ff": 512, "type": "q8_0", "seed": 39},
    # IQ4_NL everywhere (embedding and head too); ffn_down rows of 480 = 15 blocks. At
    # llama.cpp's defaults every IQ4_NL matrix here (8k rows) takes its repacked kernels, as in
    # the models people download; the vec and tiled orders of other shapes are checked against
    # the reference kernels only.
    {"name": "llama-iq4_nl", "arch": "llama", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 480, "type": "iq4_nl", "repack": True, "seed": 40},
    # Mixtral-style: a llama model with experts (no expert_feed_forward_length: experts are ff
    # wide), 5 of 8 experts in Q5_K.
    {"name": "llama-moe-8x2-q5_K", "arch": "llama", "layers": 3, "embd": 256, "heads": 8,
     "kv_heads": 2, "ff": 512, "experts": 8, "experts_used": 2, "type": "q5_K",
     "type_of": {"ffn_gate_exps": "q4_K"}, "repack": True, "seed": 35},
    # gpt-oss-20b's routing (32 experts, top 4, softmax over the chosen logits), MXFP4 experts
    # (repacked at llama.cpp's defaults; down rows of 224 = 7 blocks), biases everywhere,
    # attention sinks, even layers sliding over 48 positions, YaRN x32 over a 128-position
    # original context.
    {"name": "gpt-oss-32x4-mxfp4", "arch": "gpt-oss", "layers": 4, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "experts": 32, "experts_used": 4, "ff_expert": 224,
     "type": "q8_0", "sliding_window": 48, "rope_scaling": "yarn", "rope_scale": 32.0,
     "rope_orig_ctx": 128, "rope_base": 150000.0,
     "type_of": {"ffn_gate_exps": "mxfp4", "ffn_up_exps": "mxfp4", "ffn_down_exps": "mxfp4"},
     "repack": True, "seed": 41},
    # Gemma 2: gemma3's block without head norms, with soft-capped attention scores and logits:
    # once with the default caps (50, 30), once with caps small enough that tanh bends the
    # synthetic model's scores (0.2) and logits (1.0); even layers slide over 48 positions.
    {"name": "gemma2-swa-q8_0", "arch": "gemma2", "layers": 3, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "type": "q8_0", "sliding_window": 48, "tied": True, "seed": 42},
    {"name": "gemma2-softcap-q8_0", "arch": "gemma2", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "type": "q8_0", "sliding_window": 48, "attn_softcap": 0.2,
     "final_softcap": 1.0, "tied": True, "seed": 43},
    # The low-bit K-quants large models ship in: a Q3_K_M-style mix (Q3_K with attn_v in Q5_K,
    # ffn_down in Q4_K, the head in Q6_K), an all-Q2_K llama, and a mixture of experts in IQ4_XS
    # (its experts take the tiled order for the 300-token prompt's 8+ rows per expert).
    {"name": "llama-q3_K_m", "arch": "llama", "layers": 3, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "type": "q3_K",
     "type_of": {"attn_v": "q5_K", "ffn_down": "q4_K", "output": "q6_K"}, "repack": True,
     "seed": 44},
    {"name": "llama-q2_K", "arch": "llama", "layers": 2, "embd": 256, "heads": 4, "kv_heads": 2,
     "ff": 512, "type": "q2_K", "repack": True, "seed": 45},
    {"name": "qwen3moe-8x2-iq4_xs", "arch": "qwen3moe", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "experts": 8, "experts_used": 2, "ff_expert": 256,
     "type": "iq4_xs", "seed": 46},
    # Phi-3 with LongRoPE (the 128k models): the fixtures' 512-position context exceeds the
    # first model's 128-position original context, so llama.cpp and Shoal take the long factors;
    # the second's original context (1024) holds it, so they take the short ones. Attention
    # factors as the converter computes them, sqrt(1 + ln(scale) / ln(original)): 128k over 4k
    # (Phi-3-mini-128k) for the second.
    {"name": "phi3-longrope-long-q8_0", "arch": "phi3", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "type": "q8_0", "long_rope": True, "rope_orig_ctx": 128,
     "rope_attn_factor": 1.1339, "seed": 47},
    {"name": "phi3-longrope-short-q8_0", "arch": "phi3", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "type": "q8_0", "long_rope": True, "rope_orig_ctx": 1024,
     "rope_attn_factor": 1.1902, "seed": 48},
    # Q4_0 at llama.cpp's defaults ("repack": extra buffer types on): on x86 with AVX2 it
    # repacks every Q4_0 tensor (and Q4_K: the models above with Q4_K tensors) of 8k rows and
    # runs its repacked kernels for every batch (Shoal's DotOrder::Repacked); gate and up have
    # 500 rows, so they keep vec_dot (ffn_down, 500 wide, is F16: Q4_0 needs rows of 32k). A tied Q4_0 embedding and head (repacked as
    # the output, read by rows as the embedding), and a Qwen3 with a Q4_0 head of its own.
    {"name": "llama-q4_0-repack", "arch": "llama", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 500, "type": "q4_0", "type_of": {"ffn_down": "f16"}, "tied": True,
     "repack": True, "seed": 49},
    {"name": "qwen3-q4_0-repack", "arch": "qwen3", "layers": 2, "embd": 256, "heads": 4,
     "kv_heads": 2, "ff": 512, "type": "q4_0", "repack": True, "seed": 50},
]


def synth_args(spec, vocab_from, out):
    args = ["--arch", spec["arch"], "--layers", str(spec["layers"]), "--embd", str(spec["embd"]),
            "--heads", str(spec["heads"]), "--kv-heads", str(spec["kv_heads"]),
            "--ff", str(spec["ff"]), "--type", spec["type"], "--seed", str(spec["seed"]),
            "--ctx", str(N_CTX), "--vocab-from", str(vocab_from), "--out", str(out)]
    for key, flag in (("experts", "--experts"), ("experts_used", "--experts-used"),
                      ("ff_expert", "--ff-expert"), ("rope_scaling", "--rope-scaling"),
                      ("rope_scale", "--rope-scale"), ("rope_orig_ctx", "--rope-orig-ctx"),
                      ("sliding_window", "--sliding-window"),
                      ("sliding_window_pattern", "--sliding-window-pattern"),
                      ("rope_base", "--rope-base"), ("attn_softcap", "--attn-softcap"),
                      ("final_softcap", "--final-softcap"),
                      ("rope_attn_factor", "--rope-attn-factor")):
        if key in spec:
            args += [flag, str(spec[key])]
    if spec.get("tied"):
        args.append("--tied")
    if spec.get("long_rope"):
        args.append("--long-rope")
    for kind, t in sorted(spec.get("type_of", {}).items()):
        args += ["--type-of", f"{kind}={t}"]
    return args


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def logits_hash(logits):
    return fnv1a64(np.asarray(logits, dtype="<f4").tobytes())


def uses_type(spec, type_name):
    return spec.get("type") == type_name or type_name in spec.get("type_of", {}).values()


def check_repack_possible():
    """Models with "repack" need llama.cpp's x86 repacked Q4_0, Q4_K, IQ4_NL and MXFP4 kernels:
    AVX2, and no AMX (whose buffer type would take the Q4_0 matrices first, and crashes on
    Q4_1: see gen_fixtures.py); with Q2_K, AVX-512 (llama.cpp repacks Q2_K only there)."""
    info = llama_cpp.llama_print_system_info().decode()
    if "AVX2 = 1" not in info or "AMX_INT8 = 1" in info:
        sys.exit("gen_arch_fixtures: the \"repack\" models need an x86 CPU with AVX2 and "
                 f"without AMX; this one: {info.strip()}")
    if any(spec.get("repack") and uses_type(spec, "q2_K") for spec in MODELS) and \
            "AVX512 = 1" not in info:
        sys.exit("gen_arch_fixtures: the \"repack\" models with Q2_K need an x86 CPU with "
                 f"AVX-512; this one: {info.strip()}")


def run_model(path, n_vocab_expected, prompts, extra_bufts):
    llm = load_llama(path, N_CTX, N_BATCH, extra_bufts)
    if llm.n_vocab() != n_vocab_expected:
        sys.exit(f"gen_arch_fixtures: {path.name} has {llm.n_vocab()} tokens")
    runs = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        logits = last_logits(llm)
        top = top_k(logits, 10)
        tokens, hashes, margins = [], [], []
        for step in range(N_GREEDY_STEPS):
            hashes.append(logits_hash(logits))
            best, margin = top2(logits)
            tokens.append(best)
            margins.append(round(margin, 6))
            if step + 1 < N_GREEDY_STEPS:
                llm.eval([best])
                logits = last_logits(llm)
        runs.append({"prompt_ids": ids, "tokens": tokens, "logits_fnv1a": hashes,
                     "top2_margin": margins, "top": top})
    del llm
    return runs


def main():
    if llama_cpp.__version__ != PINNED_VERSION:
        sys.exit(f"gen_arch_fixtures: llama_cpp {llama_cpp.__version__} found, {PINNED_VERSION} "
                 "pinned; use the venv from tools/llamacpp/venv.sh")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--synth", type=pathlib.Path,
                        default=ROOT / "build" / "tools" / "shoal-synth-model")
    parser.add_argument("--vocab-from", type=pathlib.Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args()

    rng = random.Random(PROMPT_SEED)
    disable_extra_buffer_types()
    if any(spec.get("repack") for spec in MODELS):
        check_repack_possible()
    models = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in MODELS:
            path = pathlib.Path(tmp) / (spec["name"] + ".gguf")
            subprocess.run([str(args.synth)] + synth_args(spec, args.vocab_from, path), check=True,
                           stdout=subprocess.DEVNULL)
            n_vocab = 49152  # the default model's vocabulary, copied in
            prompts = [[rng.randrange(n_vocab) for _ in range(n)] for n in PROMPT_LENGTHS]
            runs = run_model(path, n_vocab, prompts, bool(spec.get("repack")))
            models.append({"spec": spec, "sha256": sha256_of(path), "runs": runs})
            small = sum(1 for r in runs for m in r["top2_margin"] if m < 0.05)
            print(f"{spec['name']}: {path.stat().st_size / 2**20:.1f} MiB, "
                  f"{small} steps with top-2 margin < 0.05")

    doc = {
        "meta": {
            "llama_cpp_python": llama_cpp.__version__,
            "vocab_from": args.vocab_from.name,
            "vocab_from_sha256": sha256_of(args.vocab_from),
            "n_ctx": N_CTX, "n_threads": N_THREADS, "n_batch": N_BATCH, "n_ubatch": N_BATCH,
            "flash_attn": False, "type_k": "f16", "type_v": "f16",
            "use_extra_bufts": "only for the models whose spec has repack",
            "greedy_steps": N_GREEDY_STEPS,
            "system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "notes": (
                "Models written by shoal-synth-model from each spec (plus --ctx n_ctx and "
                "--vocab-from the default model). CPU only, extra buffer types off (as "
                "llamacpp_smollm2.json) except for the models with \"repack\": llama.cpp's "
                "defaults, which on x86 repack Q4_0, Q4_K, IQ4_NL and MXFP4 tensors of 8k rows "
                "(Q2_K too with AVX-512, which this machine has). "
                "Each prompt is evaluated as one batch from an empty KV cache, then one token "
                "per decode call, argmax fed back; EOS does not stop. "
                "logits_fnv1a[i] hashes the logits row that step i's token was chosen from."
            ),
        },
        "models": models,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
