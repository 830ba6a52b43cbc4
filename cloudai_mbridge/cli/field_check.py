"""Unknown fields and values outside a field's choices in the test and scenario TOMLs, said in the project's words
with the closest valid name ("did you mean 'transport'?"), before CloudAI's parser answers them with pydantic's
wording ("Extra inputs are not permitted", a ``literal[...]`` dump) and a different exit status per command.

A value of the wrong type or out of range (``tp = 8.0``, ``tp = "8"``, ``tp = [8, "x"]``, a table where a number
belongs) is said here too, through friendly.friendly_lines: pydantic's union errors ("Input should be a valid list"
for a scalar written in a sweep field) become the one member's error that fits what was written. A validator's own
message is left to CloudAI's parser. Imported after CloudAI and the plugin are registered (app.py)."""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any

from ..launch.invisible import describe_invisible, invisible
from ..rules.base import show_value
from ..safe_read import MAX_TOML_BYTES, read_text
from .friendly import TAG as _TYPE_TAGS
from .friendly import friendly_lines


def _models(annotation: Any) -> list[type]:
    """The pydantic model classes an annotation may hold (through Optional, unions, lists and dicts)."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is None:
        return []
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType, list, tuple, set, dict, typing.Annotated):
        return [m for a in args for m in _models(a)]
    return []


def _names_at(model: type, path: list[str]) -> list[str]:
    """The field names (and aliases) of the model(s) found by following ``path`` from ``model``."""
    current = [model]
    for key in path:
        nxt = []
        for m in current:
            for name, info in getattr(m, "model_fields", {}).items():
                if key in (name, info.alias):
                    nxt += _models(info.annotation)
        current = nxt
    names: list[str] = []
    for m in current:
        for name, info in getattr(m, "model_fields", {}).items():
            names.append(info.alias or name)
    return sorted(set(names))


def _field_path(loc: tuple) -> list[str]:
    """The error location without pydantic's union-member tags (``int``, ``literal['a','b']``, list indexes)."""
    return [str(p) for p in loc if isinstance(p, str) and not _TYPE_TAGS.search(p)]


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close:  # a different case, or a prefix ("transp")
        close = [c for c in choices if c.lower() == word.lower() or (len(word) >= 4 and c.startswith(word))][:1]
    return close[0] if close else ""


def validation_problems(where: str, model: type, data: dict, what: str) -> list[str]:
    """``model.model_validate(data)``'s unknown fields and values outside a field's choices, one line each."""
    from pydantic import ValidationError

    try:
        model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    else:
        return []
    problems: list[str] = []
    seen: set[str] = set()
    typed = [e for e in errors if e["type"] not in ("extra_forbidden",)]
    for line in friendly_lines(typed, types_only=True):
        line = f"{where}: {line}"
        if line not in seen:
            seen.add(line)
            problems.append(line)
    for err in errors:
        path = _field_path(err["loc"])
        if not path:
            continue
        dotted = ".".join(path)
        if err["type"] == "extra_forbidden":
            parent, key = path[:-1], path[-1]
            names = _names_at(model, parent)
            close = _suggest(key, names)
            hint = f"did you mean {close!r}? Fix: rename it to {close}" if close else (
                f"Fix: remove it or use one of {', '.join(names[:40])}" if names else "Fix: remove it")
            shown = show_value(err.get("input"))  # as the TOML file writes it: false, "text", [1, 2]
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            line = f"{where}: '{dotted}' = {shown} is not a field of {what}; {hint}"
        elif err["type"] == "literal_error":
            expected = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
            if not expected:
                continue
            value = err.get("input")
            close = _suggest(str(value), expected)
            hint = f"did you mean {show_value(close)}? " if close else ""
            line = (f"{where}: '{dotted}' = {show_value(value)} is not one of "
                    f"{', '.join(show_value(e) for e in expected)}; {hint}Fix: write one of those")
        else:
            continue
        if line not in seen:
            seen.add(line)
            problems.append(line)
    return problems


def _load(path: Path) -> dict | None:
    """The file's tables read as TOML 1.0 (tomllib: a mixed array such as ``[8, "x"]`` is read, so its bad element
    is named here instead of the older reader's "Not a homogeneous array")."""
    from .config_files import tomllib

    try:
        data = tomllib.loads(read_text(path, MAX_TOML_BYTES, "this TOML file"))
    except Exception:  # unreadable or not TOML: config_files.toml_file_problem says so
        return None
    return data if isinstance(data, dict) else None


def test_file_problems(paths: list[Path]) -> list[str]:
    """Typos in the test TOMLs ``paths`` of a registered workload (test_template_name)."""
    from cloudai.core import Registry

    tdefs = Registry().test_definitions_map
    problems = []
    for path in paths:
        data = _load(path)
        template = data.get("test_template_name") if data else None
        if not isinstance(template, str) or template not in tdefs:
            continue  # no template or an unknown one: CloudAI's parser names it
        problems += validation_problems(str(path), tdefs[template], data, f"the {template} test")
    return problems


def scenario_file_problems(paths: list[Path]) -> list[str]:
    """Typos in the scenario TOMLs ``paths`` (the scenario's and its [[Tests]] entries' own fields)."""
    from cloudai.models.scenario import TestScenarioModel

    problems = []
    for path in paths:
        data = _load(path)
        if data is None or "Tests" not in data:
            continue  # not a scenario (verify-configs sorts the folder's files itself)
        problems += validation_problems(str(path), TestScenarioModel, data, "the test scenario")
    return problems


_NAME_FIELDS = ("name", "test_template_name")  # of a test or scenario file; [[Tests]]: id, test_name


def invisible_problem(where: str, field: str, value: str) -> str | None:
    """A name with a character nobody sees, shown with its escape (\u200b) and name: a test named 't\u200b' is
    otherwise 'Test 't' is not defined' for a scenario that asks for 't'."""
    if not invisible(value):
        return None
    shown = value.encode("unicode_escape").decode("ascii")
    chars = describe_invisible(value)
    return (f"{where}: {field} = '{shown}' holds a character that does not show ({chars}). Fix: type the name "
            "again without it (letters, digits, '_', '-', '.')")


def invisible_name_problems(files: list[Path]) -> list[str]:
    """The names and ids of the test and scenario TOMLs ``files`` that hold an invisible character."""
    problems = []
    for path in files:
        data = _load(path)
        if not data:
            continue
        tests = data.get("Tests")
        kind = "scenario" if isinstance(tests, list) else "test"
        named = [(f"{kind} name" if f == "name" else f, data.get(f)) for f in _NAME_FIELDS]
        if isinstance(tests, list):
            for i, entry in enumerate(tests):
                if isinstance(entry, dict):
                    named += [(f"[[Tests]] #{i + 1} test id", entry.get("id")),
                              (f"[[Tests]] #{i + 1} test_name", entry.get("test_name"))]
        for field, value in named:
            problem = invisible_problem(str(path), field, value) if isinstance(value, str) else None
            if problem:
                problems.append(problem)
    return problems


def typo_problems(files: list[Path]) -> list[str]:
    """The checks over the TOMLs a command reads (each picks its own kind: a test names test_template_name, a
    scenario holds [[Tests]]): invisible characters in names, unknown fields and values."""
    return invisible_name_problems(files) + test_file_problems(files) + scenario_file_problems(files)
