"""The fields of scenario and system TOMLs that CloudAI coerces, replaces or rejects with a traceback, checked on
the file first.

CloudAI's models turn ``num_nodes = "32"`` / ``gpus_per_node = "8"`` into 32 / 8, accept ``iterations = 0`` (nothing
runs), ``gpus_per_node = 0`` (our jobs would then fall back to the GPU type's usual node) and a ``default_partition``
that no ``[[partitions]]`` defines, and raise a bare ValueError for ``time_limit = "-1"``. Here each is a message
naming the file, the field, the value and the fix, before CloudAI reads the file.
"""

from __future__ import annotations

import errno
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..launch.kubernetes import SCHEDULER as K8S_SCHEDULER

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (a dependency there)
    import tomli as tomllib

MAX_NODES = 100_000
# Tables / arrays nested deeper than this are refused before anything reads them: conf/'s files nest at most 4 deep
# ([cmd_args.src], a sweep list inside), and the recursive readers and validators after the parser (CloudAI's toml
# package, pydantic, error messages that repr the input) hit Python's recursion limit long before the parser does.
MAX_TOML_DEPTH = 32


def nesting_depth(data: Any, limit: int = MAX_TOML_DEPTH) -> tuple[int, str]:
    """How deep tables and arrays nest in ``data`` (a scalar is 0, ``{}`` 1) and the dotted path of the deepest
    branch (``[i]`` for an array element), without recursion; stops counting past ``limit``."""
    deepest, where, stack = 0, "", [(data, 0, "")]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, dict):
            children = [(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()]
        elif isinstance(value, list):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(value)]
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest, where = depth, path
        if deepest > limit:
            break
        stack.extend((child, depth, child_path) for child, child_path in children)
    return deepest, where


def toml_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a TOML file (None when it can): unreadable, not UTF-8, not TOML, or nested
    deeper than MAX_TOML_DEPTH (whatever the shape: [a.a.a] headers, a.a.a dotted keys, arrays of arrays, inline
    tables). The message names the file, the place and the fix."""
    from ..safe_read import MAX_TOML_BYTES, InputFileError, read_bytes

    try:
        data = read_bytes(path, MAX_TOML_BYTES, "this TOML file")
    except InputFileError as e:  # a FIFO, a device, a huge file: never read (issue 32)
        return str(e)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return (f"{path}: a symbolic link loop (following the link leads back to itself) [ELOOP]. Fix: point the "
                    "link at the real file, or remove it")
        return f"{path}: cannot be read ({e.strerror}). Fix: check the file's permissions"
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except RecursionError:
        parsed = None
    except UnicodeDecodeError as e:
        return f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}). Fix: save the file as UTF-8"
    except tomllib.TOMLDecodeError as e:
        return f"{path}: not valid TOML ({e}). Fix: correct the file at that line"
    depth, where = nesting_depth(parsed) if parsed is not None else (MAX_TOML_DEPTH + 1, "")
    if depth > MAX_TOML_DEPTH:
        at = f" (at {where[:80]}{'...' if len(where) > 80 else ''})" if where else ""
        return (f"{path}: tables or arrays nested more than {MAX_TOML_DEPTH} deep{at}: headers like [a.b.c...], "
                "dotted keys, arrays of arrays or inline tables; no CloudAI file needs that. Fix: flatten that part "
                "of the file")
    return None


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read(path: Path) -> dict[str, Any] | None:
    from ..safe_read import MAX_TOML_BYTES, InputFileError, read_text

    try:
        data = tomllib.loads(read_text(path, MAX_TOML_BYTES, "this TOML file"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError, InputFileError):
        return None  # the CLI's file check names these
    return data if nesting_depth(data)[0] <= MAX_TOML_DEPTH else None


_MPI = re.compile(r"^[a-z0-9_]+$")


# the system's text fields that reach an #SBATCH line, the srun line or a Kubernetes name (the namespace: below)
_SCHEDULER_FIELDS = ("name", "account", "default_partition", "extra_sbatch_args", "extra_srun_args")


def _invisible_field_problems(path: Path, data: dict[str, Any]) -> list[str]:
    """A scheduler field holding a character that does not show (launch/invisible.py): a bidi control, a zero-width
    or other format character, a control character; shown as U+XXXX with its position."""
    from ..launch.invisible import describe_invisible

    fields: list[tuple[str, Any]] = [(k, data.get(k)) for k in _SCHEDULER_FIELDS]
    for k in ("extra_sbatch_args",):
        if isinstance(data.get(k), list):
            fields[_SCHEDULER_FIELDS.index(k)] = (k, None)
            fields += [(f"{k}[{i}]", v) for i, v in enumerate(data[k])]
    partitions = data.get("partitions")
    if isinstance(partitions, list):
        fields += [(f"partitions[{i}].name", p.get("name")) for i, p in enumerate(partitions) if isinstance(p, dict)]
    problems = []
    for field, value in fields:
        chars = describe_invisible(value) if isinstance(value, str) else ""
        if chars:
            shown = value.encode("unicode_escape").decode("ascii")
            problems.append(f"{path}: {field} = '{shown}' holds a character that does not show ({chars}); it would "
                            "reach Slurm as part of the value. Fix: type the value again without it")
    return problems


# CloudAI writes this into the folder of every run (run and dry-run alike, ours and its own workloads'): a folder that
# holds one is results, not configuration, wherever it lies (a dry-run with --output-dir conf/results).
RUN_MARKER = "test-run.toml"


def config_tomls(root: Path) -> tuple[list[Path], dict[Path, int]]:
    """The TOMLs below ``root`` (a folder, searched recursively, or one file) that are configuration, and the results
    skipped: the folder right below ``root`` that holds them -> how many run folders (RUN_MARKER) it holds."""
    if not root.is_dir():
        return [root], {}
    kept: list[Path] = []
    skipped: dict[Path, set[Path]] = {}
    is_run: dict[Path, bool] = {}
    for path in sorted(root.rglob("*.toml")):
        folders = [d for d in path.parents if d == root or root in d.parents]
        run = next((d for d in folders if is_run.setdefault(d, (d / RUN_MARKER).is_file())), None)
        if run is None:
            kept.append(path)
        else:
            top = root if run == root else next(d for d in [run, *run.parents] if d.parent == root)
            skipped.setdefault(top, set()).add(run)
    return kept, {top: len(runs) for top, runs in skipped.items()}


def named_test_files(tests_dir: Path | str) -> Iterator[tuple[Any, Path]]:
    """(the ``name`` field, the file) of each test TOML in ``tests_dir``, in file-name order; a file that cannot be
    read is left out (its own error is said where it is parsed)."""
    from ..safe_read import MAX_TOML_BYTES, InputFileError, read_text

    for path in sorted(Path(tests_dir).glob("*.toml")):
        try:
            yield tomllib.loads(read_text(path, MAX_TOML_BYTES)).get("name"), path
        except (OSError, ValueError, InputFileError):
            continue


def system_file_problems(path: Path | str) -> list[str]:
    path = Path(path)
    data = _read(path)
    if not isinstance(data, dict):
        return []
    problems = _invisible_field_problems(path, data)
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
        for i, part in enumerate(partitions if isinstance(partitions, list) else []):
            groups = part.get("groups") if isinstance(part, dict) else None
            for j, group in enumerate(groups if isinstance(groups, list) else []):
                if isinstance(group, dict):
                    problems += _node_list_problems(f"{path}: partitions[{i}].groups[{j}]", group, ("nodes",))
        mpi = data.get("mpi")
        if mpi is not None and not (isinstance(mpi, str) and _MPI.match(mpi)):
            problems.append(f"{path}: mpi = {mpi!r} is not an srun --mpi type. Fix: write e.g. \"pmix\", \"pmi2\" "
                            "or \"none\" (`srun --mpi=list` shows the cluster's)")
    if scheduler in ("kubernetes", K8S_SCHEDULER):
        ns = data.get("default_namespace")
        from ..launch.kubernetes.apirules import problems_of

        # GN 69 ValidateNamespaceName (apirules.py): the regex here took "mbridge\n" ('$' matches before a newline)
        if ns is not None and problems_of("dns1123-label", ns):
            from ..launch.invisible import describe_invisible

            chars = describe_invisible(ns) if isinstance(ns, str) else ""
            hidden = f" (it holds a character that does not show: {chars})" if chars else ""
            problems.append(f"{path}: default_namespace = {ns!r} is not a Kubernetes namespace name{hidden}. Fix: "
                            "lower-case letters, digits and '-', at most 63 characters (e.g. \"mbridge\")")
    return problems


def _time_limit_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "is not a string"
    if not value.strip():
        return "is empty"
    from cloudai.util import parse_time_limit

    from ..launch.invisible import describe_invisible

    chars = describe_invisible(value.strip())
    if chars:
        return f"holds a character that does not show ({chars}) and is not a Slurm time limit"
    text = value.strip()
    try:
        limit = parse_time_limit(text)
    except (ValueError, TypeError):
        return "is not a Slurm time limit"
    except OverflowError:  # "0:99999999999999999999": a number no duration holds (issue 32)
        return "holds a number too large for any duration"
    if ":" in text and any(int(part) > 59 for part in text.split("-")[-1].split(":")[1:]):
        return "has minutes or seconds above 59"
    if limit.total_seconds() <= 0:
        return "is not a positive duration"
    return None


def _node_list_problems(where: str, table: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    """Node lists (launch/hostlist.py): each entry a Slurm hostlist CloudAI and sbatch read alike, or refused."""
    from ..launch.hostlist import hostlist_fix, hostlist_problem

    problems = []
    for key in keys:
        if key not in table:
            continue
        value = table[key]
        if not isinstance(value, list):
            problems.append(f"{where}: {key} = {_shown(value)} is not a list of node names. Fix: write "
                            f'{key} = ["gpu[001-032]"]')
            continue
        for i, entry in enumerate(value):
            why = hostlist_problem(entry)
            if why:
                problems.append(f"{where}: {key}[{i}] = {_shown(entry)} {why}: sbatch --nodelist would refuse the "
                                f"job (\"Invalid node name specified\"). Fix: {hostlist_fix()}")
                break
    return problems


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


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
        problems += _node_list_problems(where, entry, ("nodes", "exclude_nodes"))
        if "iterations" in entry:
            it = entry["iterations"]
            if not _int(it) or it < 1:
                problems.append(f"{where}: iterations = {it!r} would run the test {it!r} times. Fix: a whole number "
                                ">= 1 (1 when omitted)")
    for cycle in dependency_cycles(tests):
        chain = " -> ".join(map(repr, cycle))
        why = ("the test waits for itself, so it could never start" if len(cycle) == 2 else
               "each test waits for the next, so none of them could ever start")
        problems.append(f"{path}: [[Tests]] dependencies form a cycle, {chain}: {why}. Fix: remove one of these "
                        f"dependencies (e.g. the entry id = {cycle[-1]!r} in the dependencies of test {cycle[-2]!r})")
    return problems


def dependency_cycles(tests: list[Any]) -> list[list[str]]:
    """The cycles of the scenario's ``[[Tests]]`` dependencies (test id -> the ids in its ``dependencies``), each as
    ``[a, b, ..., a]`` from its smallest id, at most one per test; an id that no test has is CloudAI's to report."""
    graph: dict[str, list[str]] = {}
    for entry in tests:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            deps = entry.get("dependencies")
            ids = [d.get("id") for d in deps if isinstance(d, dict)] if isinstance(deps, list) else []
            graph.setdefault(entry["id"], []).extend(i for i in ids if isinstance(i, str))
    graph = {k: [d for d in v if d in graph] for k, v in graph.items()}
    cycles: dict[tuple[str, ...], list[str]] = {}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in graph:
        if start in state:
            continue
        path, stack = [start], [iter(graph[start])]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:  # back to a test on the path: a cycle
                ring = path[path.index(nxt):]
                first = ring.index(min(ring))
                ring = ring[first:] + ring[:first]
                cycles.setdefault(tuple(ring), [*ring, ring[0]])
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(graph[nxt]))
    return list(cycles.values())


def file_problems(system: Path | str | None, scenario: Path | str | None) -> list[str]:
    """The problems of a command's system file and scenario file (either may be absent), system first."""
    return [*(system_file_problems(system) if system else []), *(scenario_file_problems(scenario) if scenario else [])]
