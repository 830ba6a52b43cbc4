"""Read YAML the way kubectl types it: go-yaml v2's scalar resolution (resolve.go of gopkg.in/yaml.v2 v2.4.0) on top of
PyYAML's parser.

PyYAML's own YAML 1.1 resolver is not kubectl's: it reads ``y`` / ``N`` as strings where go-yaml v2 reads booleans,
and ``1:20`` as 80 where go-yaml v2 keeps a string. ``load_go_yaml_v2`` replaces PyYAML's implicit typing of plain
scalars by a port of go-yaml v2's ``resolve()``; quoted and block scalars stay strings, as in go-yaml. The syntax
(escapes, blocks, keys) is PyYAML's, which follows the same YAML 1.1 grammar.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

import yaml

# resolve.go: init()
_HINT = {"+": "S", "-": "S", ".": "."} | dict.fromkeys("0123456789", "D") | dict.fromkeys("yYnNtTfFoO~", "M")
_MAP: dict[str, Any] = {}
for _value, _words in (
    (True, ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")),
    (False, ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")),
    (None, ("", "~", "null", "Null", "NULL")),
    (math.nan, (".nan", ".NaN", ".NAN")),
    (math.inf, (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")),
    (-math.inf, ("-.inf", "-.Inf", "-.INF")),
):
    _MAP |= dict.fromkeys(_words, _value)
_MAP["<<"] = "<<merge>>"

_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")
_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdef"}
# allowedTimestampFormats, as Go's time.Parse reads them ("1" and "2": one or two digits; the fraction optional)
_DATE = r"(\d{4})-(\d{1,2})-(\d{1,2})"
_CLOCK = r"(\d{1,2}):(\d{1,2}):(\d{1,2})(\.\d+)?"
_TIMESTAMPS = (
    re.compile(_DATE + r"[Tt]" + _CLOCK + r"(Z|[-+]\d{2}:\d{2})\Z"),
    re.compile(_DATE + r" " + _CLOCK + r"\Z"),
    re.compile(_DATE + r"\Z"),
)


class _NotANumberError(ValueError):
    pass


def _go_parse_int(text: str, *, unsigned: bool) -> int:
    """strconv.ParseInt / ParseUint(text, 0, 64): base from the prefix (0x, 0o, 0b, 0 = octal), 64-bit range."""
    sign, rest = 1, text
    if rest[:1] in ("+", "-") and not unsigned:
        sign, rest = (-1 if rest[0] == "-" else 1), rest[1:]
    prefix = rest[:2].lower()
    base, digits = {"0x": (16, rest[2:]), "0o": (8, rest[2:]), "0b": (2, rest[2:])}.get(prefix, (10, rest))
    if base == 10 and len(rest) > 1 and rest[0] == "0":
        base, digits = 8, rest[1:]
    if not digits or any(c not in _DIGITS[base] for c in digits.lower()):
        raise _NotANumberError(text)
    value = sign * int(digits, base)
    lo, hi = (0, 2**64 - 1) if unsigned else (-(2**63), 2**63 - 1)
    if not lo <= value <= hi:
        raise _NotANumberError(text)
    return value


def _go_timestamp(text: str) -> datetime.datetime | None:
    if not re.match(r"\d{4}-", text):
        return None
    for pattern in _TIMESTAMPS:
        m = pattern.match(text)
        if m:
            y, mo, d, *clock = m.groups()
            try:
                return datetime.datetime(int(y), int(mo), int(d), *(int(c) for c in clock[:3] if c is not None))
            except ValueError:
                return None
    return None


def go_yaml_v2_resolve(text: str) -> Any:
    """What go-yaml v2 makes of a plain (unquoted) scalar."""
    hint = _HINT.get(text[:1], "") if text else "N"
    if not hint:
        return text
    if text in _MAP:
        return _MAP[text]
    if hint == ".":
        try:
            return float(text)  # strconv.ParseFloat; a '.' start leaves only decimal forms
        except ValueError:
            return text
    if hint in "DS":
        stamp = _go_timestamp(text)
        if stamp is not None:
            return stamp
        plain = text.replace("_", "")
        for unsigned in (False, True):
            try:
                return _go_parse_int(plain, unsigned=unsigned)
            except _NotANumberError:
                pass
        if _YAML_STYLE_FLOAT.match(plain):
            return float(plain)
        if plain.startswith(("0b", "-0b")):
            try:
                return int(plain.replace("0b", "", 1), 2)
            except ValueError:
                pass
    return text


class GoYamlV2Loader(yaml.SafeLoader):
    """PyYAML's parser, go-yaml v2's typing of plain scalars."""

    yaml_implicit_resolvers: dict = {}  # PyYAML keeps its table on the class: emptied here

    def resolve(self, kind: type, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0]:
            return "tag:go-yaml.v2,plain"
        return super().resolve(kind, value, implicit)


GoYamlV2Loader.add_constructor("tag:go-yaml.v2,plain", lambda loader, node: go_yaml_v2_resolve(node.value))


def load_go_yaml_v2(text: str) -> Any:
    return yaml.load(text, Loader=GoYamlV2Loader)  # a SafeLoader with one more scalar constructor
