"""Quoting helpers: every value that reaches a generated script goes through here."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping

from .envnames import reserved_env_message
from .invisible import describe_invisible

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


# How sbatch reads an ``#SBATCH`` line (Slurm's src/sbatch/opt.c, _opt_batch_script and _get_argument, 17.x to 25.x):
# the script is cut into lines at '\n' only; a line that holds "hetjob" or "packjob" anywhere (any case) starts a new
# component of a heterogeneous job; the rest of the line is split into words at unquoted whitespace; '"' and '\''
# group a word (whitespace included) and are removed; '\' makes the next character literal (inside quotes too); an
# unquoted, unescaped '#' ends the line. Any other byte is taken as is, up to a NUL, which ends the C string.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HETJOB = re.compile(r"hetjob|packjob", re.IGNORECASE)
_DIRECTIVE_PLAIN = re.compile(r"[A-Za-z0-9_.,:/=@+%~^\[\]-]*\Z")
# a name sbatch and slurmctld take (partition, account, node, time limit): none of these ever needs quoting
_NAME_UNSAFE = re.compile(r"[\s\"'\\#$`;&|<>(){}*?!]")


class SbatchFieldError(ValueError):
    """A value that an sbatch script cannot carry as written; the message names the field, the value and the fix."""


def _refuse_uncarried(text: str, what: str) -> None:
    m = _CONTROL.search(text)
    if m:
        raise SbatchFieldError(
            f"{what} {text!r} holds the control character {m.group()!r}: an #SBATCH line ends at a line break, "
            "a NUL cuts the value short, and the others reach Slurm as they are. Fix: remove it."
        )
    chars = describe_invisible(text)
    if chars:
        raise SbatchFieldError(
            f"{what} {text!r} holds a character that does not show ({chars}): Slurm would take it as part of the "
            "value, a name that looks right but matches nothing (or reads differently on screen). Fix: type the value "
            "again without it."
        )
    m = _HETJOB.search(text)
    if m:
        raise SbatchFieldError(
            f"{what} {text!r} contains {m.group()!r}: sbatch reads that word anywhere on an #SBATCH line as the start "
            "of another heterogeneous-job component. Fix: use a value without it."
        )


def directive_word(value: object, what: str) -> str:
    """``value`` written so that sbatch's #SBATCH parser reads back exactly one word equal to it: as is when it holds
    nothing the parser treats specially, else double-quoted with '\\' and '"' escaped. Refused when no quoting can
    carry it (a control character: line break, CR, NUL, tab...; "hetjob"/"packjob")."""
    text = str(value)
    _refuse_uncarried(text, what)
    if _DIRECTIVE_PLAIN.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sbatch_name(value: object, what: str, fix: str) -> str:
    """A Slurm name (partition, account, node, time limit): no whitespace, quote, '#', '\\' or shell character; Slurm
    has no such names, and on an #SBATCH line whitespace would start another option."""
    text = str(value)
    _refuse_uncarried(text, what)
    m = _NAME_UNSAFE.search(text)
    if not text or m:
        why = f"holds {m.group()!r}, which" if m else "is empty, which"
        raise SbatchFieldError(
            f"{what} {text!r} {why} no Slurm name holds (on an #SBATCH line whitespace starts another option, "
            f"quotes and '\\' are removed, '#' ends the line). Fix: {fix}"
        )
    return text


_PATTERN_UNSAFE = re.compile(r"[%\\]")


def filename_pattern_path(value: object, what: str, fix: str) -> str:
    """A path written into sbatch's/srun's --output: Slurm reads it as a filename pattern, where '%' starts a
    replacement (%j job id, %x job name, %t task rank, %N node...) and any '\\' is dropped and turns every
    replacement off (srun's per-rank %t logs would all write one file). Neither can be written literally across Slurm
    versions (srun's own expansion does not honour '%%'), so both are refused."""
    text = str(value)
    _refuse_uncarried(text, what)
    m = _PATTERN_UNSAFE.search(text)
    if m:
        raise SbatchFieldError(
            f"{what} {text!r} holds {m.group()!r}: Slurm reads --output as a filename pattern ('%' starts a "
            "replacement such as %j, %x or %t; a '\\' is dropped and turns the replacements off), so stdout and the "
            f"rank logs would be written elsewhere. Fix: {fix}"
        )
    return text


def env_exports(env: Mapping[str, str]) -> list[str]:
    lines = []
    for key, value in env.items():
        if not _ENV_NAME.match(key):
            raise ValueError(
                f"environment variable name {key!r} is not a valid shell name. Fix: use [A-Za-z_][A-Za-z0-9_]*"
            )
        reserved = reserved_env_message(key, "environment variable name")
        if reserved:
            raise SbatchFieldError(reserved)
        text = str(value)
        bad = next((c for c in text if c in "\0\r"), None)
        if bad is not None:
            raise SbatchFieldError(
                f"environment variable {key} = {text!r} holds {bad!r}: an environment value cannot hold a NUL, and a "
                "CR is read as part of the value by bash but shown as a line break. Fix: remove it."
            )
        lines.append(f"export {key}={q(text)}")
    return lines


def split_args(raw: str | None, what: str) -> list[str]:
    """A free-form argument string from a system file, split the way a shell would, then re-quoted word by word."""
    if not raw:
        return []
    chars = describe_invisible(raw.replace("\t", " "))  # tabs separate words as spaces do; line breaks: single_line
    if chars and "\n" not in raw and "\r" not in raw:
        raise SbatchFieldError(f"{what} {raw!r} holds a character that does not show ({chars}). Fix: type the "
                               "arguments again without it.")
    try:
        return shlex.split(single_line(raw, what))
    except ValueError as exc:
        raise ValueError(f"{what} {raw!r} cannot be split into words: {exc}. Fix: balance its quotes.") from None
