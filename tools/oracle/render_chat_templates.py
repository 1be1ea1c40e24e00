#!/usr/bin/env python3
"""Render the real chat templates in tests/data/chat_templates/ with Jinja2, as Hugging Face
transformers does, and print the results as JSON: the independent oracle for latte::ChatTemplate.

Every tests/data/chat_templates/*.json other than conversations.json and oracle_renders.json holds
one model's real `chat_template` (plus its bos_token / eos_token). Each conversation of
conversations.json is rendered with add_generation_prompt true and false.

    python3 tools/oracle/render_chat_templates.py > tests/data/chat_templates/oracle_renders.json
    python3 tools/oracle/render_chat_templates.py --check   # compare with the committed file

The Jinja environment mirrors transformers' apply_chat_template: a sandboxed environment with
trim_blocks and lstrip_blocks, the loopcontrols extension, raise_exception(), strftime_now() and a
tojson filter that keeps non-ASCII text (ensure_ascii=False) and accepts indent.
"""

import argparse
import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

DEFAULT_DATA_DIR = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "chat_templates"
NOT_TEMPLATES = {"conversations.json", "oracle_renders.json"}


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_all(data_dir):
    env = make_environment()
    conversations = json.loads((data_dir / "conversations.json").read_text(encoding="utf-8"))["conversations"]
    renders = {}
    for path in sorted(data_dir.glob("*.json")):
        if path.name in NOT_TEMPLATES:
            continue
        spec = json.loads(path.read_text(encoding="utf-8"))
        template = env.from_string(spec["chat_template"])
        per_conversation = {}
        for conversation in conversations:
            outputs = {}
            for key, add_generation_prompt in (("generation_prompt", True), ("no_generation_prompt", False)):
                outputs[key] = template.render(
                    messages=conversation["messages"],
                    add_generation_prompt=add_generation_prompt,
                    bos_token=spec.get("bos_token", ""),
                    eos_token=spec.get("eos_token", ""),
                )
            per_conversation[conversation["id"]] = outputs
        renders[path.name] = {"latte_format": spec["latte_format"], "renders": per_conversation}
    return {
        "generator": "tools/oracle/render_chat_templates.py with Jinja2 " + jinja2.__version__,
        "templates": renders,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=pathlib.Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--check", action="store_true",
                        help="compare with <data-dir>/oracle_renders.json instead of printing")
    args = parser.parse_args()
    result = render_all(args.data_dir)
    if not args.check:
        json.dump(result, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
        return 0
    committed = json.loads((args.data_dir / "oracle_renders.json").read_text(encoding="utf-8"))
    mismatches = 0
    for name, entry in result["templates"].items():
        old = committed["templates"].get(name, {}).get("renders", {})
        for conversation, outputs in entry["renders"].items():
            for key, text in outputs.items():
                if old.get(conversation, {}).get(key) != text:
                    mismatches += 1
                    print(f"MISMATCH {name} {conversation} {key}:\n  jinja2: {text!r}\n  file:   "
                          f"{old.get(conversation, {}).get(key)!r}")
    print(f"{mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
