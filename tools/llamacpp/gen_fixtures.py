#!/usr/bin/env python3
"""Generates tests/fixtures/llamacpp_smollm2.json: what llama.cpp (through the pinned
llama-cpp-python) says about the default model, for Shoal's correctness tests.

  tokenize  token ids for every string of tokenizer_corpus.json, under both flags
            (add_special = add BOS/EOS if the model asks for them; parse_special = turn
            special-token text like "<|im_end|>" into its control token)
  greedy    64 greedy steps for every prompt of greedy_prompts.json: argmax ids, decoded text,
            and the top-1/top-2 logit margin at each step (a small margin marks a step where
            a tiny numeric difference may legitimately flip the choice)
  logits    the top-10 (id, logit) after the last prompt token of every greedy prompt

Greedy decoding reads raw logits from the context (no llama.cpp sampler), so nothing random is
involved. EOS does not stop generation: every run has exactly 64 tokens.

Run with the venv made by venv.sh:
  "$(tools/llamacpp/venv.sh)/bin/python" tools/llamacpp/gen_fixtures.py [--model PATH]
"""

import argparse
import hashlib
import json
import pathlib
import sys

import numpy as np

import llama_cpp
import llama_cpp.llama_cpp as llama_capi
from llama_cpp import Llama

PINNED_VERSION = "0.3.36"
ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = FIXTURES / "llamacpp_smollm2.json"

N_THREADS = 2
N_CTX = 1024  # longest prompt (319 tokens) + 64 generated tokens fits with room to spare
N_BATCH = 512  # every prompt is evaluated in one batch (one ubatch)
N_GREEDY_STEPS = 64
N_TOP_LOGITS = 10
SMALL_MARGIN = 0.05

# Categories whose strings are also tokenized with add_special=true / parse_special=false, so
# both flags are covered where they make a difference (and where they should not).
ADD_SPECIAL_CATEGORIES = {"basic", "special_token_text", "whitespace"}
NO_PARSE_SPECIAL_CATEGORIES = {"special_token_text", "basic", "code"}


_EXTRA_BUFTS = False  # what the patched llama_model_default_params asks for


def disable_extra_buffer_types():
    """Makes Llama() load weights without llama.cpp's "extra" CPU buffer types (AMX and repacked
    layouts). On this project's AMX-capable build machine the AMX Q4_1 matmul of the vendored
    llama.cpp segfaults on the first decode (llama.cpp issue #20824, open at the time); without
    extra buffers every matmul runs the plain ggml-cpu dot-product path. Llama() takes no
    argument for this, so the default model parameters are patched before it reads them
    (load_llama's extra_bufts turns them back on for one model)."""
    default_params = llama_capi.llama_model_default_params

    def patched():
        params = default_params()
        params.use_extra_bufts = _EXTRA_BUFTS
        return params

    llama_capi.llama_model_default_params = patched


def load_llama(path, n_ctx, n_batch, extra_bufts=False):
    """The model on the CPU as the fixtures need it: N_THREADS threads, one ubatch of n_batch,
    no flash attention, extra buffer types off (call disable_extra_buffer_types first) unless
    extra_bufts: then llama.cpp's defaults, weight repacking included."""
    global _EXTRA_BUFTS
    _EXTRA_BUFTS = extra_bufts
    llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                n_threads=N_THREADS, n_threads_batch=N_THREADS, n_gpu_layers=0,
                logits_all=False, flash_attn=False, verbose=False)
    _EXTRA_BUFTS = False
    if llm.model_params.use_extra_bufts != extra_bufts:
        sys.exit(f"could not set use_extra_bufts={extra_bufts} (see disable_extra_buffer_types)")
    return llm


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def last_logits(llm):
    """The logits row of the last evaluated token, as float32 numpy (a copy)."""
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def top2(logits):
    """(argmax id with ties to the lowest id, logit(top1) - logit(top2))."""
    best = int(np.argmax(logits))  # np.argmax returns the first maximum: the lowest id
    rest = logits.copy()
    rest[best] = -np.inf
    return best, float(logits[best]) - float(np.max(rest))


def top_k(logits, k):
    # Stable sort of -logits keeps ties in ascending id order.
    order = np.argsort(-logits, kind="stable")[:k]
    return [[int(i), float(logits[i])] for i in order]


def token_bytes(llm, ids, special):
    out = b""
    buf = (llama_cpp.ctypes.c_char * 256)()
    for t in ids:
        n = llama_cpp.llama_token_to_piece(llm._model.vocab, t, buf, len(buf), 0, special)
        if n < 0:
            raise RuntimeError(f"token {t}: piece longer than {len(buf)} bytes")
        out += bytes(buf[:n])
    return out


def tokenize_entries(llm, corpus):
    entries = []
    for item in corpus:
        text, category = item["text"], item["category"]
        flags = [(False, True)]
        if category in ADD_SPECIAL_CATEGORIES:
            flags.append((True, True))
        if category in NO_PARSE_SPECIAL_CATEGORIES:
            flags.append((False, False))
        for add_special, parse_special in flags:
            ids = llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special)
            entries.append(
                {
                    "text": text,
                    "add_special": add_special,
                    "parse_special": parse_special,
                    "ids": [int(i) for i in ids],
                }
            )
    return entries


def greedy_and_logits(llm, prompts):
    greedy, logits_entries = [], []
    for item in prompts:
        prompt = item["prompt"]
        # add_special=true is llama.cpp's default for a prompt; whether that adds BOS is the
        # model's rule (tokenizer.ggml.add_bos_token), recorded in meta.
        prompt_ids = [int(i) for i in llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)]
        llm.reset()
        llm.eval(prompt_ids)
        logits = last_logits(llm)
        logits_entries.append({"prompt": prompt, "top": top_k(logits, N_TOP_LOGITS)})

        tokens, margins = [], []
        for step in range(N_GREEDY_STEPS):
            best, margin = top2(logits)
            tokens.append(best)
            margins.append(round(margin, 6))
            if step + 1 < N_GREEDY_STEPS:
                llm.eval([best])
                logits = last_logits(llm)
        text = token_bytes(llm, tokens, special=True).decode("utf-8", errors="replace")
        greedy.append(
            {
                "name": item.get("name", ""),
                "prompt": prompt,
                "prompt_ids": prompt_ids,
                "tokens": tokens,
                "text": text,
                "top2_margin": margins,
            }
        )
    return greedy, logits_entries


def main():
    if llama_cpp.__version__ != PINNED_VERSION:
        sys.exit(f"gen_fixtures: llama_cpp {llama_cpp.__version__} found, {PINNED_VERSION} pinned; "
                 "use the venv from tools/llamacpp/venv.sh")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=pathlib.Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args()

    corpus = json.loads((FIXTURES / "tokenizer_corpus.json").read_text(encoding="utf-8"))["strings"]
    prompts = json.loads((FIXTURES / "greedy_prompts.json").read_text(encoding="utf-8"))["prompts"]

    disable_extra_buffer_types()
    llm = load_llama(args.model, N_CTX, N_BATCH)
    vocab = llm._model.vocab
    cparams = llm.context_params
    type_names = {0: "f32", 1: "f16", 8: "q8_0"}

    tokenize = tokenize_entries(llm, corpus)
    greedy, logits_entries = greedy_and_logits(llm, prompts)

    eos = int(llama_cpp.llama_vocab_eos(vocab))
    doc = {
        "meta": {
            "llama_cpp_python": llama_cpp.__version__,
            "model": args.model.name,
            "model_sha256": sha256_of(args.model),
            "n_ctx": N_CTX,
            "n_threads": N_THREADS,
            "n_batch": cparams.n_batch,
            "n_ubatch": cparams.n_ubatch,
            "flash_attn": False,
            "type_k": type_names.get(cparams.type_k, str(cparams.type_k)),
            "type_v": type_names.get(cparams.type_v, str(cparams.type_v)),
            "n_gpu_layers": 0,
            "use_extra_bufts": False,
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "bos_id": int(llama_cpp.llama_vocab_bos(vocab)),
            "eos_id": eos,
            "n_vocab": llm.n_vocab(),
            "greedy_steps": N_GREEDY_STEPS,
            "system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "notes": (
                "CPU only, without extra buffer types (no AMX, no weight repacking: the AMX path of "
                "this llama.cpp segfaults on the generating machine, llama.cpp issue #20824), so "
                "matmuls use ggml-cpu's plain quantized dot products (activations quantized to "
                "Q8_1 for Q4_1 weights). Each prompt is tokenized with add_special=true, parse_special=true and "
                "evaluated in one batch from an empty KV cache; then one token per decode call. "
                "Greedy = argmax of the raw logits, ties to the lowest id; EOS is NOT treated as a "
                "stop (exactly greedy_steps tokens are recorded, generation continues past EOS). "
                "top2_margin[i] = logit(top1) - logit(top2) at step i, rounded to 1e-6; steps with a "
                "small margin may flip under tiny numeric differences. 'text' is the UTF-8 decode of "
                "the generated tokens' pieces with special tokens rendered (invalid UTF-8 replaced by "
                "U+FFFD). logits[i].top are the 10 largest logits after the last prompt token of "
                "greedy[i], ties in ascending id order. Tokenize entries: every corpus string with "
                "add_special=false, parse_special=true, plus add_special=true for categories "
                f"{sorted(ADD_SPECIAL_CATEGORIES)} and parse_special=false for "
                f"{sorted(NO_PARSE_SPECIAL_CATEGORIES)}."
            ),
        },
        "tokenize": tokenize,
        "greedy": greedy,
        "logits": logits_entries,
    }
    args.out.write_text(json.dumps(doc, ensure_ascii=True, indent=1) + "\n", encoding="utf-8")

    margins = [m for g in greedy for m in g["top2_margin"]]
    small = [m for m in margins if m < SMALL_MARGIN]
    eos_runs = sum(1 for g in greedy if eos in g["tokens"])
    print(f"wrote {args.out}")
    print(f"  tokenize entries: {len(tokenize)} ({len(corpus)} corpus strings)")
    print(f"  greedy prompts:   {len(greedy)} x {N_GREEDY_STEPS} steps; runs that emitted EOS: {eos_runs}")
    print(f"  greedy steps with top2 margin < {SMALL_MARGIN}: {len(small)} of {len(margins)}"
          f" (min margin {min(margins):.6f})")
    for g in greedy:
        low = [i for i, m in enumerate(g["top2_margin"]) if m < SMALL_MARGIN]
        if low:
            print(f"    {g['name']}: steps {low}")


if __name__ == "__main__":
    main()
