#!/usr/bin/env python3
"""Writes tests/unit/tokenizer/llamacpp_variants.json: what llama.cpp says about tokenizers the
default model does not exercise, for test_tokenizer_variants.

  bpe   The default model's vocabulary and merges under other tokenizer.ggml.pre values
        ("llama3", "qwen2", "default", "gpt-2"): the vocabulary stays, only the
        pre-tokenizer (and what llama.cpp ties to it, like ignore_merges) changes. The test
        rebuilds the same vocabulary from the model file and overrides `pre`.
  spm   A SentencePiece vocabulary ("llama" model) built here and stored whole in the fixture:
        <unk> <s> </s>, the 256 <0xXX> byte tokens, a control and a user-defined token, then
        the first pieces of the default model's vocabulary spelled as SentencePiece pieces
        (bytes decoded, ' ' -> U+2581), scored by rank.

For each, llama.cpp loads a vocabulary-only GGUF written here (every key of the model's
metadata, tokenizer keys replaced, no tensors) and tokenizes the corpus of
tests/fixtures/tokenizer_corpus.json plus a few strings below.

Run with the llama-cpp-python venv of tools/llamacpp/venv.sh:
  "$(tools/llamacpp/venv.sh)/bin/python" tests/unit/tokenizer/gen_variants_fixture.py [MODEL]
"""

import json
import pathlib
import struct
import sys
import tempfile

import llama_cpp
from llama_cpp import Llama

ROOT = pathlib.Path(__file__).resolve().parents[3]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
CORPUS = ROOT / "tests" / "fixtures" / "tokenizer_corpus.json"
OUT = pathlib.Path(__file__).resolve().parent / "llamacpp_variants.json"

BPE_PRES = ["llama3", "qwen2", "default", "gpt-2"]
SPM_PIECES = 1500

EXTRA = [
    "a 12", "x\t\ty", "   leading", "trailing   ", "\n\n\nA", "1234567 89", "\u00a0nbsp\u3000",
    "abc\u0085def", "'s's'S'LL'Re", "\u216b \u00bd \u0663\u0664 \u2460\u2461", "\t \n \r\n \t",
    "foo  bar   baz", "\u2028\u2029", " " * 20 + "y", "x\r\n\r\ny", "$+<=>^~|`!", "a.b,c;d:e",
    "<|im_end|>text<|user|>more<s>", "12,345.67 and 3.14159",
]

# GGUF metadata value types (ggml/docs/gguf.md).
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
          T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}


def read_metadata(path):
    """[(key, type, value)] of a GGUF v3 file; arrays as (element type, [values])."""
    data = path.read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n]
        pos += n
        return s

    def value(t):
        if t == T_STR:
            return string()
        if t == T_ARR:
            et, n = take("<I"), take("<Q")
            return (et, [value(et) for _ in range(n)])
        return take(SCALAR[t])

    assert data[:4] == b"GGUF", f"{path}: not a GGUF file"
    pos = 4
    version, _, n_kv = take("<I"), take("<Q"), take("<Q")
    assert version == 3, version
    out = []
    for _ in range(n_kv):
        key = string().decode()
        t = take("<I")
        out.append((key, t, value(t)))
    return out


def write_vocab_gguf(path, metadata):
    """A GGUF v3 file with this metadata and no tensors."""
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", 3, 0, len(metadata))

    def put(t, v):
        if t == T_STR:
            out.extend(struct.pack("<Q", len(v)) + v)
        elif t == T_ARR:
            et, items = v
            out.extend(struct.pack("<IQ", et, len(items)))
            for item in items:
                put(et, item)
        else:
            out.extend(struct.pack(SCALAR[t], v))

    for key, t, v in metadata:
        put(T_STR, key.encode())
        out.extend(struct.pack("<I", t))
        put(t, v)
    path.write_bytes(bytes(out))


def replace(metadata, updates, drop=()):
    keys = {k for k, _, _ in metadata}
    out = [(k, *updates[k]) if k in updates else (k, t, v) for k, t, v in metadata if k not in drop]
    out += [(k, *tv) for k, tv in updates.items() if k not in keys]
    return out


def byte_alphabet():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping, n = {}, 0
    for b in range(256):
        if b in keep:
            mapping[chr(b)] = b
        else:
            mapping[chr(256 + n)] = b
            n += 1
    return mapping


def spm_vocab(metadata):
    """tokens, scores, types of the SentencePiece test vocabulary."""
    meta = {k: v for k, _, v in metadata}
    alphabet = byte_alphabet()
    tokens = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    tokens += [b"<|im_end|>", b"<|user|>"]
    types += [3, 4]
    seen = set(tokens)
    pieces = []
    bpe_tokens, bpe_types = meta["tokenizer.ggml.tokens"][1], meta["tokenizer.ggml.token_type"][1]
    for text, t in zip(bpe_tokens, bpe_types):
        if t != 1:
            continue
        try:
            raw = bytes(alphabet[c] for c in text.decode()).decode()
        except (KeyError, UnicodeDecodeError):
            continue
        piece = raw.replace(" ", "\u2581").encode()
        if piece in seen:
            continue
        seen.add(piece)
        pieces.append(piece)
        if len(pieces) == SPM_PIECES:
            break
    tokens += pieces
    types += [1] * len(pieces)
    scores = [0.0] * (len(tokens) - len(pieces)) + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def tokenize_all(model_path, texts, add_special, parse_special):
    llm = Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    return [[int(i) for i in llm.tokenize(t.encode(), add_bos=add_special, special=parse_special)]
            for t in texts]


def dump(doc):
    """Compact JSON with one id list per line, so a regenerated fixture diffs readably."""
    def compact(v):
        return json.dumps(v, ensure_ascii=True, separators=(",", ":"))

    def id_lists(indent, name, lists, last):
        out = [f'{indent}"{name}": [']
        out += [f"{indent} " + compact(ids) + ("," if j + 1 < len(lists) else "")
                for j, ids in enumerate(lists)]
        out.append(indent + "]" + ("" if last else ","))
        return out

    lines = ["{", ' "meta": ' + compact(doc["meta"]) + ",", ' "texts": [']
    lines += ["  " + compact(t) + ("," if j + 1 < len(doc["texts"]) else "")
              for j, t in enumerate(doc["texts"])]
    lines += [" ],", ' "bpe": {']
    pres = list(doc["bpe"])
    for i, pre in enumerate(pres):
        lines += id_lists("  ", pre, doc["bpe"][pre], i + 1 == len(pres))
    lines += [" },", ' "spm": {']
    for key in ("tokens", "scores", "types"):
        lines.append(f'  "{key}": ' + compact(doc["spm"][key]) + ",")
    modes = list(doc["spm"]["ids"])
    lines.append('  "ids": {')
    for i, mode in enumerate(modes):
        lines += id_lists("   ", mode, doc["spm"]["ids"][mode], i + 1 == len(modes))
    lines += ["  }", " }", "}"]
    return "\n".join(lines) + "\n"


def main():
    model = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else MODEL
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))["strings"]
    texts = [item["text"] for item in corpus] + EXTRA
    metadata = read_metadata(model)
    doc = {"meta": {"llama_cpp_python": llama_cpp.__version__, "model": model.name,
                    "spm_pieces": SPM_PIECES}, "texts": texts}
    with tempfile.TemporaryDirectory() as tmp:
        doc["bpe"] = {}
        for pre in BPE_PRES:
            path = pathlib.Path(tmp) / f"bpe_{pre}.gguf"
            write_vocab_gguf(path, replace(metadata, {"tokenizer.ggml.pre": (T_STR, pre.encode())}))
            doc["bpe"][pre] = tokenize_all(path, texts, False, True)

        tokens, scores, types = spm_vocab(metadata)
        spm_keys = {
            "tokenizer.ggml.model": (T_STR, b"llama"),
            "tokenizer.ggml.tokens": (T_ARR, (T_STR, tokens)),
            "tokenizer.ggml.scores": (T_ARR, (T_F32, scores)),
            "tokenizer.ggml.token_type": (T_ARR, (T_I32, types)),
            "tokenizer.ggml.bos_token_id": (T_U32, 1),
            "tokenizer.ggml.eos_token_id": (T_U32, 2),
            "tokenizer.ggml.unknown_token_id": (T_U32, 0),
        }
        drop = {"tokenizer.ggml.pre", "tokenizer.ggml.merges", "tokenizer.ggml.add_bos_token",
                "tokenizer.ggml.add_space_prefix", "tokenizer.ggml.padding_token_id",
                "tokenizer.chat_template"}
        path = pathlib.Path(tmp) / "spm.gguf"
        write_vocab_gguf(path, replace(metadata, spm_keys, drop))
        doc["spm"] = {
            "tokens": [t.decode() for t in tokens], "scores": scores, "types": types,
            "ids": {
                # add_special=false with parse_special=true / false (add_special only adds
                # BOS here, which test_tokenizer_spm checks by hand)
                "special": tokenize_all(path, texts, False, True),
                "plain": tokenize_all(path, texts, False, False),
            },
        }
    OUT.write_text(dump(doc), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    sys.exit(main())
