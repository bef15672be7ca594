"""conf/config.yaml, generated from the config dataclasses: their defaults are the paper's values, their attribute
docstrings the comments. One source of defaults: edit a dataclass (or register a method), then
`python -m pipelines.defaults --write`, which also recomposes params.yaml as `dvc exp run` would without overrides
(tests/test_config.py fails until both match). Profiles (conf/profile/*.yaml) stay hand-written.

Usage: python -m pipelines.defaults [--write]
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import textwrap
import typing
from typing import Any

import yaml

from lopd.core import registry
from lopd.core.config import CONF_DIR, REPO_ROOT, Config

CONFIG_YAML = CONF_DIR / "config.yaml"
WIDTH = 120
HEADER = """\
# lopd-suite parameters: the paper's values. GENERATED from the config dataclasses (lopd/core/config.py, and each
# method's beside it: baselines/config.py, lopd/latent/config.py), whose docstrings are the comments below: edit a
# dataclass, then `python -m pipelines.defaults --write`. DVC composes params.yaml from this file, the chosen profile
# (conf/profile/<name>.yaml, applied on top) and your `dvc exp run -S key=value` overrides (applied last), so
# params.yaml holds every value a stage runs with. Edit conf/profile/ or the dataclasses, never params.yaml.
defaults:
  - _self_
  - profile: cpu  # smoke (tiny random model, minutes) | cpu (Qwen2.5-Coder-0.5B-Instruct, 2 cores) | paper (GPU)
"""


def docstrings(cls: type) -> dict[str, str]:
    """A dataclass's attribute docstrings (the string right after each field), by field name."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = after.value.value
    return docs


def first_sentence(text: str | None) -> str:
    words = " ".join((text or "").split())
    return re.split(r"(?<=[a-z0-9)])\. (?=[A-Z])", words)[0].rstrip(".")


def class_doc(cls: type) -> str | None:
    """The class's own docstring; None for the signature a dataclass writes when it has none."""
    doc = cls.__doc__
    return None if doc is None or doc.startswith(f"{cls.__name__}(") else doc


def scalar(value: Any) -> str:
    """A value as YAML spells it on one line (flow style)."""
    return yaml.safe_dump([value], default_flow_style=True, width=10_000, sort_keys=False).strip()[1:-1]


def line(indent: str, key: str, value: Any, comment: str) -> list[str]:
    """`key: value  # comment` (a section's header has no value), the comment on the line above when the line would
    pass WIDTH."""
    text = f"{indent}{key}: {value}" if value != "" else f"{indent}{key}:"
    if not comment:
        return [text]
    inline = f"{text}  # {comment}"
    if len(inline) <= WIDTH:
        return [inline]
    wrapped = textwrap.wrap(comment, WIDTH - len(indent) - 2)
    return [*(f"{indent}# {part}" for part in wrapped), text]


def section_lines(key: str, cls: type, values: dict[str, Any]) -> list[str]:
    if not values:
        return line("", key, "{}", first_sentence(class_doc(cls)))
    docs = {}
    for klass in reversed(cls.__mro__):  # a method section's `steps` and `lr` are documented on MethodConfig
        if dataclasses.is_dataclass(klass):
            docs.update(docstrings(klass))
    out = line("", key, "", first_sentence(class_doc(cls)))
    for name, value in values.items():
        if value and isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            # named entries (learn.runs): one line each
            out += line("  ", name, "", first_sentence(docs.get(name)))
            out += [f"    {entry}: {scalar(fields)}" for entry, fields in value.items()]
        else:
            out += line("  ", name, scalar(value), first_sentence(docs.get(name)))
    return out


def config_yaml() -> str:
    """conf/config.yaml as the dataclasses define it: every key of params.yaml but the profile's name."""
    defaults = Config().to_dict()
    hints = typing.get_type_hints(Config)
    top_docs = docstrings(Config)
    out = HEADER.splitlines()
    sections = {name: spec.config_class() for name, spec in registry.METHODS.items()}
    for key, value in defaults.items():
        if key == "profile":
            continue  # set by the profile the defaults list picks
        cls = sections.get(key) or hints.get(key)
        if dataclasses.is_dataclass(cls):
            out += ["", *section_lines(key, cls, value)]
        else:
            out += line("", key, scalar(value), first_sentence(top_docs.get(key)))
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite conf/config.yaml and params.yaml (else: check)")
    args = parser.parse_args()
    text = config_yaml()
    if args.write:
        from dvc.utils.hydra import compose_and_dump

        CONFIG_YAML.write_text(text)
        compose_and_dump(REPO_ROOT / "params.yaml", str(CONF_DIR), None, "config", str(REPO_ROOT), [])
        print(f"wrote {CONFIG_YAML} and params.yaml (the default composition)")
    elif CONFIG_YAML.read_text() != text:
        sys.exit("conf/config.yaml differs from the dataclasses' defaults: run `python -m pipelines.defaults --write`")
    else:
        print("conf/config.yaml matches the dataclasses")


if __name__ == "__main__":
    main()
