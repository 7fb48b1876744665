#!/usr/bin/env python3
"""Generates tests/fixtures/chat_templates.json: the prompts the model families' own Jinja chat
templates render for a few conversations, for test_chat_template to compare Shoal's native
renderers (engine/model/chat_template.cpp) against, character for character.

The templates are the copies the pinned llama.cpp ships in models/templates/ (taken from each
model's Hugging Face repository), rendered with jinja2 the way Hugging Face transformers'
apply_chat_template does (trim_blocks, lstrip_blocks, raise_exception, tojson, strftime_now
fixed to DATE so the output is reproducible). BOS is left empty: Shoal's renderers leave it to
the tokenizer, and so does this reference.

Run with the venv made by venv.sh (it has jinja2, a dependency of llama-cpp-python):
  "$(tools/llamacpp/venv.sh)/bin/python" tools/llamacpp/gen_chat_fixtures.py
"""

import argparse
import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.sandbox

from gen_fixtures import FIXTURES, PINNED_VERSION

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = FIXTURES / "chat_templates.json"
DEFAULT_SOURCE = (pathlib.Path.home() / ".cache" / "shoal" / f"llama.cpp-{PINNED_VERSION}" / "src" /
                  "vendor" / "llama.cpp")
DATE = datetime.date(2026, 12, 2)

# (Shoal format name, template file in models/templates, eos_token the template may write).
TEMPLATES = [
    ("chatml", "Qwen-Qwen2.5-7B-Instruct.jinja", "<|im_end|>"),
    ("qwen3", "Qwen-Qwen3-0.6B.jinja", "<|im_end|>"),
    # 3.1 and 3.3 write a fixed date, 3.2 today's.
    ("llama3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|eot_id|>"),
    ("llama3.1", "meta-llama-Llama-3.2-3B-Instruct.jinja", "<|eot_id|>"),
    ("gemma", "google-gemma-2-2b-it.jinja", "<eos>"),
    ("phi3", "microsoft-Phi-3.5-mini-instruct.jinja", "<|endoftext|>"),
    ("mistral-v7", "Mistral-Small-3.2-24B-Instruct-2506.jinja", "</s>"),
    ("harmony", "openai-gpt-oss-120b.jinja", "<|return|>"),
]

# The conversations: each rendered with the generation prompt (and the last one also without).
CONVERSATIONS = {
    "one_turn": [{"role": "user", "content": "What is the capital of France?"}],
    "system_and_history": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Name a prime number."},
    ],
    "history_ends_with_assistant": [
        {"role": "user", "content": "Say yes."},
        {"role": "assistant", "content": "Yes."},
    ],
    # A thinking model's earlier reply, kept whole in the history (Qwen3 drops the reasoning).
    "reasoning_in_history": [
        {"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "<think>\nIt has no divisors.\n</think>\n\nYes."},
        {"role": "user", "content": "And 9?"},
    ],
    # ... and as the turn being continued (Qwen3 keeps it).
    "reasoning_at_end": [
        {"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "<think>\nIt has no divisors.\n</think>\n\nYes."},
    ],
}

# The tools the tool conversations offer (OpenAI's `tools`): key order, a quote, a newline and
# non-ASCII text in them check that Shoal writes each as the templates' `tojson` does.
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. \"Zürich\""},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two numbers.\nReturns their sum.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "number", "default": 0.5}},
            "required": ["a"]}}},
    # Schema shapes gpt-oss's template writes as TypeScript each its own way.
    {"type": "function", "function": {
        "name": "search_notes", "description": "Searches the notes.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "nullable": True, "description": "Words to find."},
            "tags": {"type": "array", "items": {"type": "string"}},
            "limit": {"type": "integer", "default": 10},
            "exact": {"type": "boolean"},
            "filter": {"type": "object", "properties": {
                "after": {"type": "string"}, "count": {"type": "number"}},
                "required": ["after"]},
            "ids": {"type": "array", "items": {"type": "integer"}, "nullable": True},
            "mode": {"type": ["string", "null"]},
            "ranges": {"type": "array", "items": {"type": "object", "properties": {
                "from": {"type": "number"}, "to": {"type": "number"}}}},
            "pairs": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "when": {"oneOf": [{"type": "string", "description": "An ISO date."},
                               {"type": "number", "default": 0}]},
            "extra": {}},
            "required": ["query"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time.",
                                      "parameters": {"type": "object", "properties": {}}}},
]


def call(name, arguments):
    """An assistant's tool call as clients send it (arguments as an object, as llama.cpp's server
    hands them to templates), with `arguments_text`, json.dumps of them, for the C++ test."""
    return {"type": "function", "function": {
        "name": name, "arguments": arguments,
        "arguments_text": json.dumps(arguments, ensure_ascii=False)}}


# Conversations rendered with TOOLS offered, for the formats with tool calls.
TOOL_CONVERSATIONS = {
    "tools_one_turn": [{"role": "user", "content": "Weather in Zürich?"}],
    "tools_calls_and_results": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris, and 2+3?"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("get_weather", {"city": "Paris"}), call("add", {"a": 2, "b": 3})]},
        {"role": "tool", "content": "18 °C, sunny"},
        {"role": "tool", "content": "5"},
    ],
    "tools_call_after_text_then_answer": [
        {"role": "user", "content": "Is it cold in Oslo?"},
        {"role": "assistant", "content": "Let me check.",
         "tool_calls": [call("get_weather", {"unit": "celsius", "city": "Oslo"})]},
        {"role": "tool", "content": "{\"temp\": -3}"},
        {"role": "assistant", "content": "Yes: -3 °C."},
        {"role": "user", "content": "Thanks."},
    ],
    # One call with text before it and its result, the reply still to come (gpt-oss writes that
    # text as the call's analysis).
    "tools_one_call_and_result": [
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": "I will use add.",
         "tool_calls": [call("add", {"a": 2, "b": 3})]},
        {"role": "tool", "content": "5"},
    ],
    # A thinking model's tool step: its reasoning stays (it is after the last user query).
    "tools_reasoning_step": [
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": "<think>\nUse the tool.\n</think>\n\n",
         "tool_calls": [call("add", {"a": 2, "b": 3})]},
        {"role": "tool", "content": "5"},
    ],
}
TOOL_FORMATS = ("chatml", "qwen3", "llama3.1", "harmony")
# Tool conversations a format's template cannot render: Llama 3.x and gpt-oss take one call per
# message (gpt-oss's template drops the rest); only a thinking model writes <think> reasoning.
TOOL_SKIP = {("chatml", "tools_reasoning_step"), ("llama3.1", "tools_reasoning_step"),
             ("llama3.1", "tools_calls_and_results"), ("harmony", "tools_reasoning_step"),
             ("harmony", "tools_calls_and_results")}

# Conversations that end with the assistant's turn are rendered without the generation prompt.
ENDS_WITH_ASSISTANT = {"history_ends_with_assistant", "reasoning_at_end"}

# Conversations a format's template cannot render (gemma: no system role) or that only a
# thinking model writes.
SKIP = {("gemma", "system_and_history")} | {
    (fmt, name) for fmt in ("chatml", "llama3.1", "gemma", "phi3", "mistral-v7", "harmony")
    for name in ("reasoning_in_history", "reasoning_at_end")}


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def render(source, messages, eos, add_generation_prompt, tools=None):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: DATE.strftime(fmt)
    template = env.from_string(source)
    return template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                           bos_token="", eos_token=eos, tools=tools)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-cpp", type=pathlib.Path, default=DEFAULT_SOURCE,
                        help="the pinned llama.cpp source tree (tools/llamacpp/venv.sh unpacks it)")
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args()
    templates_dir = args.llama_cpp / "models" / "templates"
    if not templates_dir.is_dir():
        sys.exit(f"gen_chat_fixtures: {templates_dir} not found")

    cases, sources = [], {}
    for fmt, file, eos in TEMPLATES:
        source = (templates_dir / file).read_text(encoding="utf-8")
        sources[file] = source
        for name, messages in CONVERSATIONS.items():
            if (fmt, name) in SKIP:
                continue
            prefixes = [name not in ENDS_WITH_ASSISTANT]
            for add in prefixes:
                cases.append({"format": fmt, "template": file, "conversation": name,
                              "messages": messages, "add_generation_prompt": add,
                              "text": render(source, messages, eos, add)})
                print(f"{fmt} {name} add_generation_prompt={add}: "
                      f"{len(cases[-1]['text'])} chars")
        if fmt not in TOOL_FORMATS:
            continue
        for name, messages in TOOL_CONVERSATIONS.items():
            if (fmt, name) in TOOL_SKIP:
                continue
            cases.append({"format": fmt, "template": file, "conversation": name,
                          "messages": messages, "add_generation_prompt": True,
                          "tools": TOOLS,
                          "tools_text": [json.dumps(t, ensure_ascii=False) for t in TOOLS],
                          "text": render(source, messages, eos, True, TOOLS)})
            print(f"{fmt} {name} with tools: {len(cases[-1]['text'])} chars")

    doc = {
        "meta": {
            "llama_cpp_python": PINNED_VERSION,
            "jinja2": jinja2.__version__,
            "date": DATE.isoformat(),
            "notes": ("templates: each Jinja source as shipped. cases: each text is that "
                      "template's own rendering (jinja2, trim_blocks and lstrip_blocks, "
                      "bos_token empty, strftime_now fixed to `date`). Shoal must recognise "
                      "`format` from the source and render the same text, with the harmony "
                      "renderer's current date set to `date`. A case with `tools` offers them "
                      "(`tools_text`: each as json.dumps writes it, which is what `tojson` "
                      "gives); a tool call's `arguments_text` is json.dumps of its arguments."),
        },
        "templates": sources,
        "cases": cases,
    }
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
