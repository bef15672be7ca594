"""ACEBench function docs -> OpenAI tool schemas, and checking a call's arguments against them.

The docs use Python-ish type names ("dict", "list", "float"...) which are mapped to JSON-schema types.
A `required` name that is not a property is mapped to the closest property name when there is one
(reserve_flight lists "payment_methods" but defines "payment_method") and dropped otherwise.
"""

from __future__ import annotations

import difflib
from typing import Any

from lopd.core.multiturn import ToolCall

JSON_TYPES = {"dict": "object", "object": "object", "list": "array", "array": "array", "tuple": "array",
              "string": "string", "str": "string", "integer": "integer", "int": "integer", "float": "number",
              "number": "number", "boolean": "boolean", "bool": "boolean"}
"""ACEBench type name -> JSON-schema type; other names (e.g. "any") leave the value unchecked."""


class ArgumentError(ValueError):
    pass


def to_openai_tool(doc: dict[str, Any]) -> dict[str, Any]:
    parameters = convert_schema(doc.get("parameters") or {"type": "dict", "properties": {}})
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    return {"type": "function", "function": {"name": doc["name"], "description": doc.get("description", ""),
                                             "parameters": parameters}}


def convert_schema(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            if str(value).lower() in JSON_TYPES:
                out["type"] = JSON_TYPES[str(value).lower()]
        elif key == "properties":
            out["properties"] = {name: convert_schema(sub) for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            out["items"] = convert_schema(value)
        elif key != "required":
            out[key] = value
    if "required" in node:
        properties = list(out.get("properties", {}))
        required: list[str] = []
        for name in node["required"]:
            close = difflib.get_close_matches(name, properties, 1, 0.8)
            match = name if name in properties else close[0] if close else None
            if match is not None and match not in required:
                required.append(match)
        out["required"] = required
    return out


def validate_arguments(arguments: Any, parameters: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments for the call, or ArgumentError naming the first problem. Integral floats
    become ints; a null optional argument counts as not given."""
    if not isinstance(arguments, dict):
        raise ArgumentError(f"arguments must be an object, got {type(arguments).__name__}")
    given = {k: v for k, v in arguments.items() if not (v is None and k not in parameters.get("required", []))}
    return _check(given, parameters, "arguments")


def _check(value: Any, schema: dict[str, Any], where: str) -> Any:
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            raise ArgumentError(f"{where} must be an object, got {_describe(value)}")
        properties = schema.get("properties")
        if properties is None:
            return value
        inside = "" if where == "arguments" else f" in {where}"
        unknown = [k for k in value if k not in properties]
        if unknown:
            allowed = ", ".join(properties) or "none"
            raise ArgumentError(f"unexpected argument {unknown[0]!r}{inside} (allowed: {allowed})")
        missing = [k for k in schema.get("required", []) if k not in value]
        if missing:
            raise ArgumentError(f"missing required argument {missing[0]!r}{inside}")
        value = {k: _check(v, properties[k], k if where == "arguments" else f"{where}.{k}") for k, v in value.items()}
    elif kind == "array":
        if not isinstance(value, list):
            raise ArgumentError(f"{where} must be an array, got {_describe(value)}")
        value = [_check(v, schema.get("items", {}), f"{where}[{i}]") for i, v in enumerate(value)]
    elif kind == "integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ArgumentError(f"{where} must be an integer, got {_describe(value)}")
    elif kind == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ArgumentError(f"{where} must be a number, got {_describe(value)}")
    elif kind == "string":
        if not isinstance(value, str):
            raise ArgumentError(f"{where} must be a string, got {_describe(value)}")
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise ArgumentError(f"{where} must be a boolean, got {_describe(value)}")
    if "enum" in schema and value not in schema["enum"]:
        raise ArgumentError(f"{where} must be one of {schema['enum']}, got {value!r}")
    return value


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


def canonical_call(call: ToolCall, parameters: dict[str, Any] | None) -> ToolCall:
    """The call as compared by process accuracy: validated (when possible) and without arguments that
    equal their documented default (`modify_flight(..., add_baggage=0)` == `modify_flight(...)`)."""
    if parameters is None:
        return call
    try:
        arguments = validate_arguments(call.arguments, parameters)
    except ArgumentError:
        arguments = dict(call.arguments)
    properties = parameters.get("properties", {})
    return ToolCall(call.name, {k: v for k, v in arguments.items()
                                if not ("default" in properties.get(k, {}) and properties[k]["default"] == v)})
