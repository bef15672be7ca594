"""Tool schemas and environment introductions derived from an environment's class source.

The host never imports an environment class: it parses the source with `ast`. Every public method
(no leading underscore) of the class is a tool. Its schema comes from the signature and docstring:

    def update_limit(self, policy_id: str, new_limit: float, note: Optional[str] = None) -> dict:
        \"\"\"One-line or multi-line description of the tool.

        Args:
            policy_id: What the parameter is.
            new_limit: ...
            note: ...
        \"\"\"

Parameters without a default are required; `Optional[X]` or a default makes one optional. Every
parameter must be documented under `Args:`, so a schema always matches its method exactly.

The class docstring gives the environment introduction (the text before `Rules:`) and its
constraint rules (the `- ` lines after it), EnvScaler's `environment_introduction` and
`constraints_rules` fields.
"""

from __future__ import annotations

import ast
import re
from typing import Any

QUERY_PREFIXES = ("get_", "list_", "search_", "find_", "check_")
"""A tool whose name starts with one of these only reads state; every other tool modifies it."""

_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
               "list": "array", "List": "array", "dict": "object", "Dict": "object"}


def is_query_tool(name: str) -> bool:
    return name.startswith(QUERY_PREFIXES)


def find_class(source: str, class_name: str) -> ast.ClassDef:
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return node
    raise ValueError(f"class {class_name!r} not found in its source")


def public_methods(cls: ast.ClassDef) -> list[ast.FunctionDef]:
    return [n for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]


def _json_type(annotation: ast.expr | None, where: str) -> tuple[dict[str, Any], bool]:
    """JSON schema of an annotation, and whether the annotation allows None."""
    if annotation is None:
        raise ValueError(f"{where}: parameter needs a type annotation")
    if isinstance(annotation, ast.Subscript):
        head = ast.unparse(annotation.value)
        if head == "Optional":
            inner, _ = _json_type(annotation.slice, where)
            return inner, True
        if head in ("list", "List"):
            item, _ = _json_type(annotation.slice, where)
            return {"type": "array", "items": item}, False
        if head in ("dict", "Dict"):
            return {"type": "object"}, False
    name = ast.unparse(annotation)
    if name not in _JSON_TYPES:
        raise ValueError(f"{where}: unsupported annotation {name!r}")
    return {"type": _JSON_TYPES[name]}, False


def _parse_docstring(doc: str, where: str) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) of a Google-style docstring."""
    head, _, args_block = doc.partition("Args:")
    description = " ".join(head.split())
    params: dict[str, str] = {}
    current = None
    for line in args_block.splitlines():
        match = re.match(r"\s*(\w+):\s*(.*)$", line)
        if match:
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif line.strip() and current is not None:
            params[current] += " " + line.strip()
    if not description:
        raise ValueError(f"{where}: docstring has no description")
    return description, params


def tool_schema(method: ast.FunctionDef, class_name: str = "") -> dict[str, Any]:
    """The OpenAI function schema of one method."""
    where = f"{class_name}.{method.name}"
    doc = ast.get_docstring(method)
    if not doc:
        raise ValueError(f"{where}: missing docstring")
    description, param_docs = _parse_docstring(doc, where)
    args = method.args
    if args.vararg or args.kwarg or args.posonlyargs:
        raise ValueError(f"{where}: only plain named parameters are supported")
    positional = args.args[1:]  # drop self
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    properties, required = {}, []
    for arg, default in pairs:
        schema, nullable = _json_type(arg.annotation, f"{where}({arg.arg})")
        if arg.arg not in param_docs:
            raise ValueError(f"{where}: parameter {arg.arg!r} is not documented under Args:")
        properties[arg.arg] = {**schema, "description": param_docs[arg.arg]}
        if default is None and not nullable:
            required.append(arg.arg)
    extra = set(param_docs) - set(properties)
    if extra:
        raise ValueError(f"{where}: Args: documents unknown parameters {sorted(extra)}")
    return {"type": "function", "function": {
        "name": method.name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }}


def tool_schemas(source: str, class_name: str) -> list[dict[str, Any]]:
    cls = find_class(source, class_name)
    return [tool_schema(m, class_name) for m in public_methods(cls)]


def introduction(source: str, class_name: str) -> tuple[str, list[str]]:
    """(environment_introduction, constraints_rules) from the class docstring."""
    doc = ast.get_docstring(find_class(source, class_name)) or ""
    head, _, rules_block = doc.partition("Rules:")
    rules = [line.strip()[2:].strip() for line in rules_block.splitlines() if line.strip().startswith("- ")]
    return " ".join(head.split()), rules
