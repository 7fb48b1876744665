#!/usr/bin/env python3
"""Writes the fixture prompts (tests/fixtures/greedy_prompts.json) as texts separated by NUL
bytes, the format gpu_model_check reads: the GPU machine has Python but no JSON library for C++.

Usage: fixture_prompts.py OUT [FIXTURE.json]
"""
import json
import pathlib
import sys


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = pathlib.Path(__file__).resolve().parents[2]
    fixture = pathlib.Path(sys.argv[2]) if len(sys.argv) == 3 else \
        root / "tests" / "fixtures" / "greedy_prompts.json"
    prompts = [p["prompt"] for p in json.loads(fixture.read_text(encoding="utf-8"))["prompts"]]
    if any("\0" in p for p in prompts):
        print("fixture_prompts: a prompt holds a NUL byte", file=sys.stderr)
        return 1
    pathlib.Path(sys.argv[1]).write_bytes("\0".join(prompts).encode("utf-8"))
    print(f"fixture_prompts: {len(prompts)} prompts -> {sys.argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
