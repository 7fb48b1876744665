#!/usr/bin/env python3
"""Compares Shoal's CPU backend with llama.cpp op by op: every intermediate tensor both compute
for one batch of token ids, matched by the names llama.cpp's graph callbacks give them
("attn_norm-0", "Qcur-0", "kqv_out-0", "ffn_inp-0", "l_out-0", ..., "result_output").

Use it when a parity test (test_cpu_arch_parity, test_cpu_reference_logits) fails: the first
tensor that is not bit-identical names the op to look at.

Shoal's side comes from build/tools/shoal-dump-tensors (CpuStage's tensor observer). llama.cpp's
comes from its eval callback (llama_context_params.cb_eval), under the settings the fixtures use:
CPU, extra buffer types off (on, llama.cpp's defaults, for a fixture whose spec has "repack" and
with --repack), no flash attention, f16 KV cache, one ubatch for the batch.

For each tensor Shoal reports, the llama.cpp tensors of the same name and layer with as many
elements are candidates (llama.cpp names several steps alike: Qcur before and after RoPE); the
report takes the identical one, else the one with the smallest NMSE, and says which it was.

  "$(tools/llamacpp/venv.sh)/bin/python" tools/llamacpp/compare_ops.py \\
      --fixture gemma2-softcap-q8_0 --run 1
  "$(tools/llamacpp/venv.sh)/bin/python" tools/llamacpp/compare_ops.py \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --ids 1,2,3,4 [--prefix 5,6] [--json out.json]

--fixture takes a model of tests/fixtures/llamacpp_arch.json (written by shoal-synth-model from
its spec) and the ids of its run --run (0: the 1-token prompt, 1: 7 tokens, 2: 300 tokens).
Exit status 0 when the comparison ran (with --expect-identical: only when every tensor matched
bit for bit), 1 otherwise.
"""

import argparse
import ctypes
import json
import math
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

import llama_cpp
import llama_cpp.llama_cpp as llama_capi
from gen_fixtures import DEFAULT_MODEL, N_THREADS, PINNED_VERSION, disable_extra_buffer_types, \
    load_llama
import gen_arch_fixtures

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARCH_FIXTURES = ROOT / "tests" / "fixtures" / "llamacpp_arch.json"
GGML_TYPE_F32 = 0  # enum ggml_type (ggml.h)


class GgmlTensor(ctypes.Structure):
    """struct ggml_tensor of the pinned ggml (ggml.h: GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64,
    GGML_MAX_SRC 10, GGML_MAX_NAME 64). Only type, ne and name are read; the data is copied with
    ggml_backend_tensor_get, which works for any buffer."""
    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def ggml_base():
    lib_dir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml-base.so", "libggml-base.dylib"):
        if (lib_dir / name).exists():
            lib = ctypes.CDLL(str(lib_dir / name))
            break
    else:
        sys.exit(f"compare_ops: no libggml-base in {lib_dir}")
    lib.ggml_nelements.restype = ctypes.c_int64
    lib.ggml_nelements.argtypes = [ctypes.c_void_p]
    lib.ggml_is_contiguous.restype = ctypes.c_bool
    lib.ggml_is_contiguous.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_tensor_get.restype = None
    lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.c_size_t]
    return lib


def split_name(name):
    """("attn_norm", 0) for "attn_norm-0"; (name, -1) for a name without a layer suffix."""
    base, dash, layer = name.rpartition("-")
    if dash and layer.isdigit():
        return base, int(layer)
    return name, -1


class LlamaCapture:
    """llama.cpp's tensors of the evaluations made while `recording`, by (name, layer), each a
    list of float32 arrays in the order the graph produced them."""

    def __init__(self):
        self.lib = ggml_base()
        self.recording = False
        self.tensors = {}
        self.layout_checked = False
        self.callback = llama_capi.ggml_backend_sched_eval_callback(self._observe)

    def _observe(self, t_ptr, ask, _user_data):
        if ask:
            return self.recording  # ask for every node while recording
        t = GgmlTensor.from_address(t_ptr)
        n = self.lib.ggml_nelements(t_ptr)
        if not self.layout_checked:
            # The struct layout above must be the library's: ne must multiply out to nelements.
            if math.prod(t.ne) != n:
                sys.exit("compare_ops: struct ggml_tensor layout differs from the library's")
            self.layout_checked = True
        if t.type != GGML_TYPE_F32 or not self.lib.ggml_is_contiguous(t_ptr):
            return True
        data = np.empty(n, dtype=np.float32)
        self.lib.ggml_backend_tensor_get(t_ptr, data.ctypes.data, 0, n * 4)
        key = split_name(t.name.decode("utf-8", "replace"))
        self.tensors.setdefault(key, []).append(data)
        return True

    def install(self):
        """Makes every context llama_cpp creates from here on call the callback."""
        # Llama() takes no argument for the callback; it reads the default context parameters
        # from llama_cpp.llama_cpp when it creates its context.
        default_params = llama_capi.llama_context_default_params
        callback = self.callback

        def patched():
            params = default_params()
            params.cb_eval = callback
            params.cb_eval_user_data = None
            return params

        llama_capi.llama_context_default_params = patched


def shoal_tensors(dump_tool, model, ids, prefix, n_ctx, threads):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(dump_tool), "--model", str(model), "--ids", ",".join(map(str, ids)),
               "--ctx", str(n_ctx), "--threads", str(threads), "--out", tmp]
        if prefix:
            cmd += ["--prefix", ",".join(map(str, prefix))]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        index = json.loads((pathlib.Path(tmp) / "index.json").read_text())["tensors"]
        data = np.fromfile(pathlib.Path(tmp) / "tensors.f32", dtype="<f4")
    out = []
    for e in index:
        n = e["rows"] * e["cols"]
        out.append((e["name"], e["layer"], e["rows"], e["cols"],
                    data[e["offset"]:e["offset"] + n].copy()))
    return out


def compare(mine, theirs):
    """Bit identity, max |difference| and NMSE (sum of squared differences over the sum of
    squares of llama.cpp's values) of two float32 arrays."""
    identical = mine.tobytes() == theirs.tobytes()
    diff = mine.astype(np.float64) - theirs.astype(np.float64)
    denom = float(np.sum(theirs.astype(np.float64) ** 2))
    nmse = float(np.sum(diff ** 2)) / denom if denom > 0 else float(np.sum(diff ** 2))
    return identical, float(np.max(np.abs(diff))) if diff.size else 0.0, nmse


def main():
    if llama_cpp.__version__ != PINNED_VERSION:
        sys.exit(f"compare_ops: llama_cpp {llama_cpp.__version__} found, {PINNED_VERSION} "
                 "pinned; use the venv from tools/llamacpp/venv.sh")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=pathlib.Path, help="a GGUF model")
    source.add_argument("--fixture", help="a model name of tests/fixtures/llamacpp_arch.json")
    parser.add_argument("--run", type=int, default=1, help="with --fixture: the run's prompt")
    parser.add_argument("--ids", help="with --model: comma-separated token ids (one batch)")
    parser.add_argument("--prefix", default="", help="ids evaluated first, not compared")
    parser.add_argument("--repack", action="store_true",
                        help="with --model: llama.cpp at its defaults (extra buffer types, weight "
                             "repacking on), as the fixtures' \"repack\" models")
    parser.add_argument("--n-ctx", type=int, default=512)
    parser.add_argument("--threads", type=int, default=N_THREADS)
    parser.add_argument("--dump", type=pathlib.Path,
                        default=ROOT / "build" / "tools" / "shoal-dump-tensors")
    parser.add_argument("--synth", type=pathlib.Path,
                        default=ROOT / "build" / "tools" / "shoal-synth-model")
    parser.add_argument("--json", type=pathlib.Path, help="also write the report here")
    parser.add_argument("--expect-identical", action="store_true",
                        help="exit 1 unless every compared tensor is bit-identical")
    args = parser.parse_args()

    def ids_of(text):
        try:
            return [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            sys.exit(f"compare_ops: expected comma-separated token ids, got '{text}'")

    prefix = ids_of(args.prefix)
    with tempfile.TemporaryDirectory() as tmp:
        if args.fixture:
            fixtures = json.loads(ARCH_FIXTURES.read_text())
            entry = next((m for m in fixtures["models"] if m["spec"]["name"] == args.fixture),
                         None)
            if entry is None:
                names = ", ".join(m["spec"]["name"] for m in fixtures["models"])
                sys.exit(f"compare_ops: no fixture model '{args.fixture}' (have: {names})")
            if not 0 <= args.run < len(entry["runs"]):
                sys.exit(f"compare_ops: --run must be 0..{len(entry['runs']) - 1}")
            model = pathlib.Path(tmp) / (args.fixture + ".gguf")
            gen_arch_fixtures.N_CTX = fixtures["meta"]["n_ctx"]
            subprocess.run([str(args.synth)] + gen_arch_fixtures.synth_args(
                entry["spec"], DEFAULT_MODEL, model), check=True, stdout=subprocess.DEVNULL)
            ids = entry["runs"][args.run]["prompt_ids"]
            n_ctx = fixtures["meta"]["n_ctx"]
            repack = bool(entry["spec"].get("repack"))
        else:
            if not args.ids:
                sys.exit("compare_ops: --model needs --ids")
            model, ids, n_ctx = args.model, ids_of(args.ids), args.n_ctx
            repack = args.repack
        if not ids:
            sys.exit("compare_ops: no token ids")

        mine = shoal_tensors(args.dump, model, ids, prefix, n_ctx, args.threads)

        capture = LlamaCapture()
        capture.install()
        disable_extra_buffer_types()
        llm = load_llama(model, n_ctx, max(len(ids), len(prefix), 1), repack)
        if prefix:
            llm.eval(prefix)
        capture.recording = True
        llm.eval(ids)
        capture.recording = False
        del llm

    rows, first_bad = [], None
    for name, layer, r, c, values in mine:
        candidates = [(i, t) for i, t in enumerate(capture.tensors.get((name, layer), []))
                      if t.size == values.size]
        row = {"name": name, "layer": layer, "rows": r, "cols": c}
        if not candidates:
            have = [t.size for t in capture.tensors.get((name, layer), [])]
            row["status"] = ("not in llama.cpp's graph as a contiguous f32 tensor" if not have
                             else f"no llama.cpp tensor of {values.size} elements")
        else:
            scored = [(i,) + compare(values, t) for i, t in candidates]
            best = min(scored, key=lambda s: (not s[1], s[3]))
            row.update({"occurrence": best[0], "of": len(capture.tensors[(name, layer)]),
                        "identical": best[1], "max_abs_diff": best[2], "nmse": best[3]})
            row["status"] = "identical" if best[1] else "differs"
            if not best[1] and first_bad is None:
                first_bad = row
        rows.append(row)

    width = max(len(f"{r['name']}-{r['layer']}") for r in rows)
    for r in rows:
        label = f"{r['name']}-{r['layer']}" if r["layer"] >= 0 else r["name"]
        shape = f"{r['rows']}x{r['cols']}"
        if "identical" in r:
            print(f"{label:<{width}}  {shape:>10}  {r['status']:<9}  max|d| {r['max_abs_diff']:.3e}"
                  f"  nmse {r['nmse']:.3e}  (llama.cpp #{r['occurrence']} of {r['of']})")
        else:
            print(f"{label:<{width}}  {shape:>10}  {r['status']}")
    compared = [r for r in rows if "identical" in r]
    same = sum(1 for r in compared if r["identical"])
    summary = {"model": str(args.fixture or args.model), "ids": len(ids), "prefix": len(prefix),
               "shoal_tensors": len(rows), "compared": len(compared), "identical": same,
               "first_difference": first_bad}
    print(json.dumps({k: v for k, v in summary.items() if k != "first_difference"}))
    if first_bad:
        print(f"first difference: {first_bad['name']}-{first_bad['layer']} "
              f"(nmse {first_bad['nmse']:.3e})")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "tensors": rows}, indent=1) + "\n")
    if args.expect_identical and (same != len(compared) or not compared):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
