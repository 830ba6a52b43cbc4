"""Pydantic's validation errors said in a user's words: the field path, the value as written, what is expected and
the fix, one line per field.

A sweep field (CloudAI DSE) is ``int | list[int]`` (or float, str, bool): pydantic tries both members and reports
both failures, so ``tp = 8.0`` comes back as "Input should be a valid integer" *and* "Input should be a valid list".
Only one member can be what the user meant: the scalar member when the value written is a scalar (a number, a
string, a boolean, a table), the list member when it is a list. That member's error is kept and phrased here; the
other is dropped. A list's bad element is named by its position and value, with the whole list shown.
"""

from __future__ import annotations

import math
import re
from typing import Any

# pydantic's union-member and validator tags in an error location ('constrained-int', 'list[constrained-int]',
# "literal['a','b']", 'function-after[...]'): not field names
TAG = re.compile(r"^((constrained-)?(int|str|float|bool|bytes|decimal)|list|dict|tuple|set|none|chain|nullable|"
                 r"lax-or-strict|function-[a-z-]+|json-or-python|tagged-union|is-instance)$|[\[\]]")
_LIST_TAG = re.compile(r"^(list|tuple|set|frozenset)\[")

# error type -> what the field expects, in words
_EXPECTED = {
    "int_type": "a whole number", "int_parsing": "a whole number", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "string_type": "text in quotes", "bool_type": "true or false", "bool_parsing": "true or false",
    "dict_type": "a table", "model_type": "a table", "model_attributes_type": "a table",
    "list_type": "a list", "literal_error": "one of the listed values",
}
_EXAMPLE = {"a whole number": "8", "a number": "0.5", "a finite number": "0.5", "text in quotes": '"text"',
            "true or false": "true", "a table": "{ ... }", "a list": "[ ... ]"}
_BOUNDS = {"greater_than": ("gt", "greater than"), "greater_than_equal": ("ge", "at least"),
           "less_than": ("lt", "less than"), "less_than_equal": ("le", "at most"),
           "multiple_of": ("multiple_of", "a multiple of")}
TYPE_KINDS = frozenset(_EXPECTED) - {"literal_error"} | set(_BOUNDS) | {"too_short", "too_long", "physical_range"}


def toml_value(value: Any, limit: int = 60) -> str:
    """``value`` as it is written in a TOML file (8.0, "8", true, [8, "x"], { a = 1 }), cut to ``limit``."""
    def one(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, float):
            return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {one(x)}" for k, x in list(v.items())[:8]) + " }" if v else "{}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(one(x) for x in v[:16]) + (", ..." if len(v) > 16 else "") + "]"
        return repr(v)

    text = one(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _split(loc: tuple) -> tuple[tuple, str | None, tuple]:
    """(field path, the union-member tag or None, what follows it: a list index, a nested field)."""
    for i, part in enumerate(loc):
        if isinstance(part, str) and TAG.search(part):
            rest = tuple(p for p in loc[i + 1:] if not (isinstance(p, str) and TAG.search(p)))
            return tuple(loc[:i]), part, rest
    return tuple(loc), None, ()


def dotted(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _fix_for(key: str, expected: str, value: Any, sweep: bool) -> str:
    """The fix for ``key = value`` where ``expected`` is wanted (a value or, for a sweep field, a list of them)."""
    example = None
    if expected == "a whole number":
        whole_float = isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e15
        if whole_float or (isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d{1,15}\s*", value)):
            example = str(int(value))
        elif isinstance(value, float) and math.isfinite(value) and abs(value) < 1e15:
            lo, hi = math.floor(value), math.ceil(value)
            return f"Fix: write a whole number, without a decimal point, such as {key} = {lo} or {key} = {hi}"
    elif expected in ("a number", "a finite number") and isinstance(value, str):
        try:
            if math.isfinite(float(value)):
                example = value.strip()
        except ValueError:
            pass
    elif expected == "true or false" and isinstance(value, str) and value.strip().lower() in ("true", "false"):
        example = value.strip().lower()
    if example is not None:
        quotes = " (no quotes)" if isinstance(value, str) else ""
        return f"Fix: write {key} = {example}{quotes}"
    shown = _EXAMPLE.get(expected, "...")
    also = f" (or a list of them for a sweep: {key} = [{shown}, ...])" if sweep else ""
    if isinstance(value, dict):
        return f"Fix: write {key} = {shown}{also} as a plain value, not as a table of its own"
    return f"Fix: write {expected}, e.g. {key} = {shown}{also}"


def _bound_phrase(err: dict) -> str | None:
    kind = err.get("type")
    if kind == "physical_range":  # workloads/fields.py physical(): a count's whole range, and why it ends there
        ctx = err.get("ctx") or {}
        return f"from {ctx.get('lo')} to {ctx.get('hi')} ({ctx.get('why')})"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        bound = (err.get("ctx") or {}).get(key)
        return f"{words} {bound}" if bound is not None else None
    return None


def _range_only(bound: str) -> str:
    """A bound phrase without its reason (the reason is said once, before the fix)."""
    return bound.split(" (", 1)[0]


def friendly_lines(errors: list[dict], types_only: bool = False) -> list[str]:
    """One line per field in error: "'cmd_args.tp' = 8.0 is not a whole number ...; Fix: ...". ``types_only``: only
    the type, range and list-length errors (a validator's own message is left to whoever shows it)."""
    groups: dict[tuple, list[tuple[str | None, tuple, dict]]] = {}
    for err in errors:
        path, tag, rest = _split(tuple(err.get("loc", ())))
        groups.setdefault(path, []).append((tag, rest, err))
    lines: list[str] = []
    for path, members in groups.items():
        line = _group_line(path, members, types_only)
        if line and line not in lines:
            lines.append(line)
    return lines


def _group_line(path: tuple, members: list[tuple[str | None, tuple, dict]], types_only: bool) -> str | None:
    if not path:
        return None
    field = dotted(path)
    key = str(path[-1]) if not isinstance(path[-1], int) else dotted(path)
    tags = {tag for tag, _, _ in members if tag}
    sweep = any(_LIST_TAG.match(t) for t in tags) and any(not _LIST_TAG.match(t) for t in tags)
    # the value as written: what a scalar member was given (the whole value), else the first error's input
    whole = next((e.get("input") for tag, rest, e in members if not rest), members[0][2].get("input"))
    if sweep:
        is_list = isinstance(whole, (list, tuple))
        members = [m for m in members if bool(m[0] and _LIST_TAG.match(m[0])) == is_list]
        if not members:
            return None
    kinds = {e.get("type") for _, _, e in members}
    if types_only and (not kinds & TYPE_KINDS or "literal_error" in kinds):
        return None
    shown = toml_value(whole)
    one = " (or a list of them, a sweep)" if sweep else ""
    # a list's element: the first bad one, by position
    elements = [(rest, e) for tag, rest, e in members if rest and isinstance(rest[0], int)]
    if elements:
        rest, err = elements[0]
        pos, value = rest[0], err.get("input")
        bound = _bound_phrase(err)
        expected = _EXPECTED.get(err.get("type", ""), "")
        what = (f"is not {expected}" if expected else
                f"must be {bound}" if bound else f"is refused ({err.get('msg', 'invalid')})")
        more = f" ({len(elements)} elements are wrong)" if len({r[0] for r, _ in elements}) > 1 else ""
        fix = (f"Fix: write every element as {expected}, e.g. {key} = [{_EXAMPLE.get(expected, '...')}, ...]"
               if expected else f"Fix: make every element {_range_only(bound)}" if bound else
               "Fix: correct that element")
        return f"'{field}' = {shown}: element {pos + 1} ({toml_value(value)}) {what}{more}. {fix}"
    if kinds & {"too_short"} and isinstance(whole, (list, tuple)):
        return f"'{field}' = {shown} is an empty list: no value to use. Fix: give the list at least one value, or a " \
               "single value"
    expected_words = [_EXPECTED[k] for k in sorted(kinds) if k in _EXPECTED and k != "list_type"]
    if not expected_words and "list_type" in kinds:
        expected_words = ["a list"]
    if expected_words:
        expected = " or ".join(dict.fromkeys(expected_words))
        if isinstance(whole, dict) and expected != "a table":
            return (f"'{field}' = {shown} is a table where {expected}{one} is expected. "
                    f"{_fix_for(key, expected_words[0], whole, sweep)}")
        if isinstance(whole, (list, tuple)) and not sweep and expected != "a list":
            return (f"'{field}' = {shown} is a list where {expected} is expected (this field is not swept). "
                    f"Fix: write one value, e.g. {key} = {_EXAMPLE.get(expected_words[0], '...')}")
        return f"'{field}' = {shown} is not {expected}{one}. {_fix_for(key, expected_words[0], whole, sweep)}"
    bounds = [b for b in (_bound_phrase(e) for _, _, e in members) if b]
    if bounds:
        return f"'{field}' = {shown} must be {' and '.join(dict.fromkeys(bounds))}. Fix: write {key} = a value " \
               f"{_range_only(bounds[0])}"
    if types_only:
        return None
    msg = "; ".join(dict.fromkeys(str(e.get("msg", "invalid")) for _, _, e in members))
    return f"'{field}' = {shown}: {msg}"
