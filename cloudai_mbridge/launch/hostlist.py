"""Slurm node names and hostlist expressions, as a scenario's ``nodes`` / ``exclude_nodes`` and a system's
``[[partitions.groups]] nodes`` write them, checked before anything expands them.

What is accepted is what both readers take and Slurm can resolve:

- CloudAI's ``parse_node_list`` (cloudai/systems/slurm/slurm_system.py) splits on ',' outside brackets and expands
  one ``prefix[ranges]`` per name; anything after ']' is glued into the range and a second '[' breaks it.
- Slurm's hostlist (src/common/hostlist.c) reads ',' as a separator and '[' ']' as a range; a node name is a host
  name (slurm.conf NodeName, also its NodeHostname by default): letters, digits, '-', '_' and '.', starting with a
  letter or digit. Any other character ('@', ':', '/', '=', a space, a control or non-ASCII character) names no
  node, and sbatch refuses the whole job ("Invalid node name specified").

A range is ``N`` or ``N-M`` with N <= M; the names one entry expands to are counted (never listed) against
MAX_NODES before anything expands them. ``partition:group:count`` (CloudAI's own form) takes the same names and a
count from 1 to MAX_NODES or ``max_avail``.
"""

from __future__ import annotations

import re

MAX_NODES = 100_000  # the largest node count any file may ask for (cli/config_files.py uses the same)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_PREFIX = re.compile(r"[A-Za-z0-9._-]*\Z")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?\Z")
_SPLIT = re.compile(r",\s*(?![^[]*\])")  # CloudAI's split: commas outside brackets
_FIX = "write node names of letters, digits, '-', '_' and '.', or a Slurm range such as gpu[001-032] or gpu[1,4-6]"


def _shown_char(c: str) -> str:
    return repr(c) if c.isprintable() else f"U+{ord(c):04X}"


def _bad_char(text: str) -> str:
    """The first character no node name holds, shown with its position (1-based) in ``text``."""
    at = next((i for i, c in enumerate(text) if not (c.isascii() and (c.isalnum() or c in "._-"))), None)
    return "" if at is None else f"{_shown_char(text[at])} at position {at + 1}"


def node_name_problem(name: str) -> str | None:
    """Why one node name (already expanded) names no Slurm node, or None."""
    if not name:
        return "is empty"
    if not _NAME.match(name):
        if not (name[0].isascii() and name[0].isalnum()):
            return f"starts with {_shown_char(name[0])}, not a letter or digit"
        return f"holds {_bad_char(name)}, which no Slurm node name holds"
    return None


def hostlist_problem(entry: object) -> str | None:
    """Why one entry of a nodes list is not a hostlist CloudAI and Slurm both read the same way, or None."""
    if not isinstance(entry, str):
        return "is not a string"
    text = entry.strip()
    if not text:
        return "is empty"
    hidden = next((i for i, c in enumerate(text) if not c.isprintable()), None)
    if hidden is not None:
        return f"holds {_shown_char(text[hidden])} at position {hidden + 1}, which no Slurm node name holds"
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            return "has ':' but is not partition:group:count"
        for what, part in zip(("partition", "group"), parts[:2], strict=True):
            why = node_name_problem(part)
            if why:
                return f"{what} {part!r} {why}"
        count = parts[2]
        if count != "max_avail" and not (count.isdigit() and 1 <= int(count) <= MAX_NODES):
            return f"count {count!r} is not a whole number from 1 to {MAX_NODES} nor max_avail"
        return None
    total = 0
    for item in _SPLIT.split(text):
        if "[" not in item and "]" not in item:
            why = node_name_problem(item)
            if why:
                return f"name {item!r} {why}"
            total += 1
            continue
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]*)\]", item)
        if not m:
            return f"{item!r} is not one prefix[ranges] (one '[', one ']' at the end)"
        prefix, ranges = m.groups()
        if not _PREFIX.match(prefix) or (prefix and node_name_problem(prefix + "0")):
            return f"prefix {prefix!r} {node_name_problem(prefix + '0') or 'is not a node name prefix'}"
        for part in ranges.split(","):
            r = _RANGE.match(part)
            if not r:
                return f"range {part!r} in {item!r} is not N or N-M (digits)"
            lo, hi = int(r.group(1)), int(r.group(2) if r.group(2) is not None else r.group(1))
            if lo > hi:
                return f"range {part!r} in {item!r} runs backwards"
            total += hi - lo + 1
            if total > MAX_NODES:
                return f"expands to more than {MAX_NODES} nodes"
        if not prefix and not ranges:
            return f"{item!r} is empty"
    if total > MAX_NODES:
        return f"expands to more than {MAX_NODES} nodes"
    return None


def hostlist_fix() -> str:
    return _FIX
