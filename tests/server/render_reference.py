#!/usr/bin/env python3
"""Reference renderings for message_shapes_test.cc: every chat template of a folder x every
request shape of a JSON file, rendered by Python jinja2 the way transformers'
apply_chat_template does, after the message normalization the server documents
(src/server/openai_types.h, ChatCompletionRequest), written here independently.

Usage: render_reference.py TEMPLATES_DIR SHAPES_JSON
Prints one JSON object per line: {"template", "shape", "rendered"} or {"template", "shape",
"error"}.
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}


def normalize_content(content, role):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and "type" in p for p in content):
        return "".join(p[TEXT_PARTS[p["type"]]] for p in content)
    assert role == "tool", content  # a tool's structured result: its JSON text
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"))


def normalize_message(message):
    out = {k: v for k, v in message.items() if v is not None or k == "content"}
    if out["role"] == "developer":
        out["role"] = "system"
    out["content"] = normalize_content(out.get("content"), out["role"])
    for call in out.get("tool_calls", []):
        fn = call["function"]
        args = fn.get("arguments")
        if args is None:
            fn["arguments"] = {}
        elif isinstance(args, str):
            try:
                fn["arguments"] = json.loads(args)
            except ValueError:
                pass
    return out


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime(2026, 11, 22, 0, 0, 0).strftime(fmt)


def main():
    templates_dir, shapes_path = sys.argv[1], sys.argv[2]
    shapes = json.load(open(shapes_path))
    table = json.load(open(f"{templates_dir}/templates.json"))["templates"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    for entry in table:
        source = open(f"{templates_dir}/{entry['file']}", encoding="utf-8").read()
        template = env.from_string(source)
        for shape in shapes["shapes"]:
            messages = [normalize_message(json.loads(json.dumps(m))) for m in shape["messages"]]
            tools = shapes["tools"] if shape["with_tools"] else None
            variables = {"messages": messages, "tools": tools, "documents": None,
                         "add_generation_prompt": True}
            for token in ("bos_token", "eos_token"):
                if entry[token] is not None:
                    variables[token] = entry[token]
            line = {"template": entry["file"], "shape": shape["id"]}
            try:
                line["rendered"] = template.render(**variables)
            except Exception as e:  # the template's own raise_exception, or a render error
                line["error"] = str(e)
            print(json.dumps(line, ensure_ascii=False))


if __name__ == "__main__":
    main()
