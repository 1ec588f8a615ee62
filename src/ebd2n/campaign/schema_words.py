"""A campaign file's JSON Schema errors in plain words: the one formatter `validate_schema`
(ebd2n.campaign.file) answers with, so `ebd2n campaign check` and the workflow say the same.

The words come from the schema itself, never from a list of keys: an unknown key is matched
(difflib) against the keys its place takes, or against the keys of other places when it belongs
elsewhere; a wrong value is told what its place takes (type, bounds, enum, const), and under
anyOf/oneOf either the one branch its type fits explains itself, or every branch is named.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

BOUNDS = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "exclusiveMaximum": "<"}
"""The schema's bounds and the words they give (`must be ≥ 1, got 0`)."""
NOUNS = {
    "integer": ("a whole number", "whole numbers"),
    "number": ("a number", "numbers"),
    "string": ("a string", "strings"),
    "boolean": ("true/false", "true/false values"),
    "null": ("null", "nulls"),
    "array": ("a list", "lists"),
    "object": ("a mapping", "mappings"),
}
"""Each JSON Schema type, singular and plural."""


def plain_error(errors: Sequence[Any], validator: Any) -> tuple[str, str]:
    """The first of `errors` (jsonschema ValidationErrors of one instance, in the validator's order)
    in plain words: (its dotted place, what is wrong there). Unknown and missing keys of the same
    place are told together, with a missing key an unknown one was likely meant for."""
    first, root = errors[0], validator.schema
    if first.validator not in ("additionalProperties", "required"):
        return _words(first, validator)
    missing = {(tuple(error.absolute_path), key) for error in errors for key in _missing([error])}
    for error in errors:  # an unknown key meant for a missing one leads, wherever either stands
        place = tuple(error.absolute_path)
        if any(_meant(key, place, error.schema, root)[1] in missing for key in _unknown(error)):
            first = error
            break
    return _place(first.absolute_path), _keys(errors, tuple(first.absolute_path), root)


def _words(error: Any, validator: Any) -> tuple[str, str]:
    """(place, words) of one error; anyOf/oneOf descend to the branch the value's type fits."""
    kind, value, instance, root = error.validator, error.validator_value, error.instance, validator.schema
    if kind in ("anyOf", "oneOf") and error.context:
        branches = [_resolve(branch, root) for branch in value]
        fitting = [index for index, branch in enumerate(branches) if _fits_type(branch, instance, validator)]
        inside = [sub for sub in error.context if fitting and sub.relative_schema_path[0] == fitting[0]]
        if len(fitting) == 1 and inside:
            return _words(inside[0], validator)
        return _place(error.absolute_path), f"{_as_written(instance)} is {_none_of([_noun(b, root) for b in branches])}"
    if kind in ("additionalProperties", "required"):
        return _place(error.absolute_path), _keys([error], tuple(error.absolute_path), root)
    if kind == "type":
        words = f"expected {_noun(error.schema, root)}, got {_as_written(instance)}"
    elif kind in BOUNDS:
        words = f"must be {BOUNDS[kind]} {value}, got {_as_written(instance)}"
    elif kind == "enum":
        words = f"must be one of {', '.join(str(choice) for choice in value)}, got {_as_written(instance)}"
        words += _did_you_mean(instance, [str(choice) for choice in value])
    elif kind == "const":
        words = f"must be {_as_written(value)}, got {_as_written(instance)}"
    else:
        words = error.message
    return _place(error.absolute_path), words


def _as_written(value: Any) -> str:
    """A value as the campaign file spells it: null, true and false as YAML does, the rest as Python."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _keys(errors: Sequence[Any], place: tuple, root: Mapping[str, Any]) -> str:
    """The unknown and the missing keys of one place: `unknown key 'seed' (did you mean 'seeds'?);
    'seeds' is missing`, or `'seeds' is missing (required)` alone."""
    here = [error for error in errors if tuple(error.absolute_path) == place]
    missing = _missing(here)
    missing_elsewhere = {
        tuple(error.absolute_path): _missing([error]) for error in errors if tuple(error.absolute_path) != place
    }
    parts: list[str] = []
    for error in here:
        for key in _unknown(error):
            hint, meant = _meant(key, place, error.schema, root)
            parts.append(f"unknown key {key!r} {hint}")
            if meant is not None and meant[1] in missing_elsewhere.get(meant[0], ()):
                parts.append(f"{_dotted(*meant)} is missing")
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        parts.append(f"{', '.join(repr(key) for key in missing)} {verb} missing" + ("" if parts else " (required)"))
    return "; ".join(dict.fromkeys(parts))


def _missing(errors: Sequence[Any]) -> list[str]:
    """The required keys the instances of these `required` errors lack, in the schema's order."""
    keys = [key for error in errors if error.validator == "required" for key in error.validator_value]
    instances = [error.instance for error in errors if error.validator == "required"]
    return list(dict.fromkeys(key for key in keys if any(key not in instance for instance in instances)))


def _unknown(error: Any) -> list[str]:
    """The keys an `additionalProperties: false` error refuses (none for any other error)."""
    if error.validator != "additionalProperties" or error.validator_value is not False:
        return []
    allowed, patterns = error.schema.get("properties", {}), error.schema.get("patternProperties", {})
    return [
        str(key)
        for key in error.instance
        if key not in allowed and not any(re.search(pattern, str(key)) for pattern in patterns)
    ]


def _meant(key: str, place: tuple, schema: Mapping[str, Any], root: Mapping[str, Any]) -> tuple[str, tuple | None]:
    """What an unknown key of `place` (whose schema is `schema`) may have meant, in words: a close
    key of its place, the same or a close key of another place, or else the list of its place's
    keys; and that (place, key), None when nothing is close."""
    allowed = list(schema.get("properties", {}))
    close = difflib.get_close_matches(key, allowed, n=2)
    if close:
        return f"(did you mean {' or '.join(repr(name) for name in close)}?)", (place, close[0])
    elsewhere = [(where, name) for where, name in _schema_keys(root) if where != place]
    exact = [(where, name) for where, name in elsewhere if name == key]
    if exact:
        where = exact[0][0]
        return f"(it belongs {'under ' + '.'.join(where) if where else 'at the top level'})", exact[0]
    near = difflib.get_close_matches(key, [name for _where, name in elsewhere], n=1, cutoff=0.85)
    if near:
        meant = next(pair for pair in elsewhere if pair[1] == near[0])
        return f"(did you mean {_dotted(*meant)}?)", meant
    return f"(the keys here: {', '.join(allowed)})" if allowed else "(this mapping takes no keys)", None


def _schema_keys(node: Any, root: Mapping[str, Any] | None = None, place: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """Every (place, key) the schema names under `properties`, from the top level down."""
    root = node if root is None else root
    node = _resolve(node, root)
    for key, sub in node.get("properties", {}).items() if isinstance(node, Mapping) else ():
        yield place, key
        yield from _schema_keys(sub, root, (*place, key))


def _dotted(place: tuple, key: str) -> str:
    return f"top-level {key!r}" if not place else repr(".".join((*place, key)))


def _did_you_mean(value: Any, choices: list[str]) -> str:
    close = difflib.get_close_matches(value, choices, n=1) if isinstance(value, str) else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def _none_of(nouns: list[str]) -> str:
    if len(nouns) == 1:
        return f"not {nouns[0]}"
    if len(nouns) == 2:
        return f"neither {nouns[0]} nor {nouns[1]}"
    return f"none of: {'; '.join(nouns)}"


def _noun(schema: Any, root: Mapping[str, Any], plural: bool = False) -> str:
    """What a schema takes, in words: `a whole number ≥ 1`, `a list of numbers > 0`, `one of a, b`."""
    schema = _resolve(schema, root)
    if not isinstance(schema, Mapping):
        return "anything" if schema is True else "nothing"
    if "enum" in schema:
        return ("values among " if plural else "one of ") + ", ".join(str(choice) for choice in schema["enum"])
    if "const" in schema:
        return repr(schema["const"])
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if "number" in types and "integer" in types:
        types.remove("integer")  # a whole number is a number
    if not types:
        return "values" if plural else "a value"
    nouns = [NOUNS[kind][plural] if kind in NOUNS else kind for kind in types]
    words = nouns[0] if len(nouns) == 1 else f"{', '.join(nouns[:-1])} or {nouns[-1]}"
    if types == ["array"] and "items" in schema:
        words += f" of {_noun(schema['items'], root, plural=True)}"
    if types == ["object"] and isinstance(schema.get("additionalProperties"), Mapping) and "properties" not in schema:
        words += f" to {_noun(schema['additionalProperties'], root, plural=True)}"
    bounds = [f"{sign} {schema[bound]}" for bound, sign in BOUNDS.items() if bound in schema]
    return words + (f" {' and '.join(bounds)}" if bounds else "")


def _fits_type(schema: Any, instance: Any, validator: Any) -> bool:
    """Whether a branch's `type` takes the value (a branch without one is not chosen by type)."""
    types = schema.get("type") if isinstance(schema, Mapping) else None
    types = [types] if isinstance(types, str) else list(types or [])
    return any(validator.is_type(instance, kind) for kind in types)


def _resolve(schema: Any, root: Mapping[str, Any]) -> Any:
    """A subschema with its local `$ref` (`#/$defs/...`) followed."""
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
        node: Any = root
        for part in schema["$ref"][2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        schema = node
    return schema


def _place(path: Any) -> str:
    return ".".join(str(part) for part in path) or "top level"
