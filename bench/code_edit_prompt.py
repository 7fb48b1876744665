#!/usr/bin/env python3
"""The code-editing workload of the speculative-decoding benchmarks: a chat prompt (ChatML, the
default model's format) that gives the model a 200-line Python file and asks for the whole file
back with one small change. A reply that does what it is asked quotes its prompt almost line for
line, which is where prompt-lookup drafting pays. The file is generated here, deterministically
(no dependence on the Python version's own sources), so every run and every machine sees the
same prompt.

Usage: bench/code_edit_prompt.py [--lines N] [--plain]   (prints the prompt to stdout)
  --plain: the file and instruction without the chat template (for other models' templates).
"""
import argparse
import random

NOUNS = ["order", "invoice", "customer", "shipment", "ledger", "account", "report", "batch",
         "record", "payment", "refund", "credit", "item", "parcel", "route", "quota"]
VERBS = ["load", "check", "merge", "split", "total", "round", "format", "send", "store",
         "count", "filter", "group"]


def source(lines: int) -> str:
    rng = random.Random(20261205)
    out = ['"""Small helpers for the billing service."""', "", "import math", "", ""]
    while len(out) < lines:
        noun, verb = rng.choice(NOUNS), rng.choice(VERBS)
        limit = rng.randint(2, 90)
        body = [
            f"def {verb}_{noun}s({noun}s, limit={limit}):",
            f'    """{verb.capitalize()} the {noun}s, at most {limit} of them."""',
            "    result = []",
            f"    for {noun} in {noun}s[:limit]:",
            f"        if {noun} is None:",
            "            continue",
            f"        result.append(math.floor({noun} * {rng.randint(2, 9)}) + {rng.randint(0, 50)})",
            "    return result",
            "",
        ]
        out.extend(body)
    return "\n".join(out[:lines]) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=200)
    p.add_argument("--plain", action="store_true")
    a = p.parse_args()
    code = source(a.lines)
    ask = ("Rename the module docstring to \"Helpers for billing.\" and return the whole file, "
           "otherwise unchanged.")
    if a.plain:
        print(f"{ask}\n\n```python\n{code}```\n", end="")
        return
    print("<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n"
          f"<|im_start|>user\n{ask}\n\n```python\n{code}```<|im_end|>\n"
          "<|im_start|>assistant\n```python\n", end="")


if __name__ == "__main__":
    main()
