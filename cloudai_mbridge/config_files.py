"""The fields of scenario and system TOMLs that CloudAI coerces, replaces or rejects with a traceback, checked on
the file first.

CloudAI's models turn ``num_nodes = "32"`` / ``gpus_per_node = "8"`` into 32 / 8, accept ``iterations = 0`` (nothing
runs), ``gpus_per_node = 0`` (our jobs would then fall back to the GPU type's usual node) and a ``default_partition``
that no ``[[partitions]]`` defines, and raise a bare ValueError for ``time_limit = "-1"``. Here each is a message
naming the file, the field, the value and the fix, before CloudAI reads the file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (a dependency there)
    import tomli as tomllib

MAX_NODES = 100_000


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return None  # the CLI's file check names these


_MPI = re.compile(r"^[a-z0-9_]+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def system_file_problems(path: Path | str) -> list[str]:
    path = Path(path)
    data = _read(path)
    if not isinstance(data, dict):
        return []
    problems = []
    for key in ("gpus_per_node", "ntasks_per_node"):
        if key in data and not (_int(data[key]) and 1 <= data[key] <= 1024):
            problems.append(f"{path}: {key} = {data[key]!r} is not a whole number from 1 to 1024. Fix: write e.g. "
                            f"{key} = 8 (no quotes), or remove the key")
    scheduler = data.get("scheduler")
    if scheduler == "slurm":
        partitions = data.get("partitions", [])
        names = [p.get("name") for p in partitions if isinstance(p, dict)] if isinstance(partitions, list) else []
        default = data.get("default_partition")
        if default is not None and default not in names:
            problems.append(f"{path}: default_partition = {default!r} is not one of the [[partitions]] "
                            f"({', '.join(map(repr, names)) or 'none defined'}). Fix: add a [[partitions]] table "
                            "with that name, or name one of those")
        mpi = data.get("mpi")
        if mpi is not None and not (isinstance(mpi, str) and _MPI.match(mpi)):
            problems.append(f"{path}: mpi = {mpi!r} is not an srun --mpi type. Fix: write e.g. \"pmix\", \"pmi2\" "
                            "or \"none\" (`srun --mpi=list` shows the cluster's)")
    if scheduler == "kubernetes":
        ns = data.get("default_namespace")
        if ns is not None and not (isinstance(ns, str) and _DNS_LABEL.match(ns)):
            problems.append(f"{path}: default_namespace = {ns!r} is not a Kubernetes namespace name. Fix: lower-case "
                            "letters, digits and '-', at most 63 characters (e.g. \"mbridge\")")
    return problems


def _time_limit_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "is not a string"
    if not value.strip():
        return "is empty"
    from cloudai.util import parse_time_limit

    text = value.strip()
    try:
        limit = parse_time_limit(text)
    except (ValueError, TypeError):
        return "is not a Slurm time limit"
    if ":" in text and any(int(part) > 59 for part in text.split("-")[-1].split(":")[1:]):
        return "has minutes or seconds above 59"
    if limit.total_seconds() <= 0:
        return "is not a positive duration"
    return None


def scenario_file_problems(path: Path | str) -> list[str]:
    path = Path(path)
    data = _read(path)
    if not isinstance(data, dict):
        return []
    tests = data.get("Tests", [])
    if not isinstance(tests, list):
        return [f"{path}: Tests = {tests!r} is not a list of [[Tests]] tables. Fix: write each test as [[Tests]]"]
    problems = []
    for i, entry in enumerate(tests):
        if not isinstance(entry, dict):
            problems.append(f"{path}: Tests[{i}] is not a table. Fix: write each test as [[Tests]]")
            continue
        where = f"{path}: [[Tests]] #{i + 1} (id = {entry.get('id')!r})"
        if "time_limit" in entry:
            why = _time_limit_problem(entry["time_limit"])
            if why:
                problems.append(f"{where}: time_limit = {entry['time_limit']!r} {why}. Fix: write HH:MM:SS, MM:SS, "
                                "D-HH:MM:SS or 30m / 2h / 1d, or remove the key for the partition's default")
        if "num_nodes" in entry:
            nodes = entry["num_nodes"]
            values = nodes if isinstance(nodes, list) else [nodes]
            if not values or not all(_int(v) and 1 <= v <= MAX_NODES for v in values):
                problems.append(f"{where}: num_nodes = {nodes!r} is not a whole number of nodes from 1 to "
                                f"{MAX_NODES}. Fix: write e.g. num_nodes = 32 (no quotes)")
        if "iterations" in entry:
            it = entry["iterations"]
            if not _int(it) or it < 1:
                problems.append(f"{where}: iterations = {it!r} would run the test {it!r} times. Fix: a whole number "
                                ">= 1 (1 when omitted)")
    return problems


def file_problems(system: Path | str | None, scenario: Path | str | None) -> list[str]:
    """The problems of a command's system file and scenario file (either may be absent), system first."""
    return [*(system_file_problems(system) if system else []), *(scenario_file_problems(scenario) if scenario else [])]
