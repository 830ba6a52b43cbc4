"""Quoting helpers: every value that reaches a generated script goes through here."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def q(value: object) -> str:
    return shlex.quote(str(value))


def argv(parts: Iterable[object]) -> str:
    return " ".join(q(p) for p in parts)


def single_line(value: str, what: str) -> str:
    """Values that land on a line of their own (#SBATCH directives) must not smuggle in another line."""
    if "\n" in value or "\r" in value:
        raise ValueError(f"{what} contains a line break: {value!r}. Fix: remove it; one value per line.")
    return value


def env_exports(env: Mapping[str, str]) -> list[str]:
    lines = []
    for key, value in env.items():
        if not _ENV_NAME.match(key):
            raise ValueError(
                f"environment variable name {key!r} is not a valid shell name. Fix: use [A-Za-z_][A-Za-z0-9_]*"
            )
        lines.append(f"export {key}={q(value)}")
    return lines


def split_args(raw: str | None, what: str) -> list[str]:
    """A free-form argument string from a system file, split the way a shell would, then re-quoted word by word."""
    if not raw:
        return []
    try:
        return shlex.split(single_line(raw, what))
    except ValueError as exc:
        raise ValueError(f"{what} {raw!r} cannot be split into words: {exc}. Fix: balance its quotes.") from None
