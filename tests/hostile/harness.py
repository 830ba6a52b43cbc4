"""The hostile-input harness: one case = one edited copy of a real conf/ trio run through the real CLI.

Each case is a system, a test and a scenario TOML (copies of files in conf/, with the case's edits), laid out as a
user's conf/ folder, plus a working folder (the CLI's cwd, where debug.log goes) whose ``out/`` is --output-dir.
The case is run through ``dry-run`` and ``verify-configs`` in child processes (CloudAI configures logging globally
and exits), many at a time. What a run left is recorded: exit status, terminal output, debug.log, every file under
the case's folder that was not there before.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import toml
from helpers import CONF, SECRETS

DELETE = object()
FIFO = object()  # a ``files`` entry: a named pipe (reading it would block forever)


@dataclass(frozen=True)
class Link:
    """A ``files`` entry: a symbolic link to ``target``."""

    target: str


@dataclass(frozen=True)
class Sparse:
    """A ``files`` entry: a file of ``size`` bytes that takes no disk space (a hole)."""

    size: int

# (system, test, scenario) under conf/ for each base
BASES = {
    "sft": ("slurm_b300_efa", "kimi_k2_sft", "kimi_k2_sft"),
    "ab": ("slurm_b300_efa", "kimi_k2_dispatcher_ab", "kimi_k2_dispatcher_ab"),
    "refit": ("local_slurm", "refit_cpu_smoke", "refit_cpu_smoke"),
    "k8s": ("eks_b300_efa", "kimi_k2_dispatcher_ab", "kimi_k2_dispatcher_ab"),
}


@dataclass(frozen=True)
class Case:
    id: str
    base: str
    edits: dict[str, Any] = field(default_factory=dict)  # "test.cmd_args.tp": value, "scenario.Tests.0.id": ...
    expect: tuple[str, ...] = ()  # fragments the error output must hold (field, value, ...)
    raw: dict[str, bytes] = field(default_factory=dict)  # "system" / "test" / "scenario": bytes written as is
    secret: str | None = None  # a secret value the case put into a TOML: must never be printed or written
    verbs: tuple[str, ...] = ("dry-run", "verify-configs", "preflight")
    argv: tuple[str, ...] | None = None  # a whole command line instead ({conf}, {work}, {out} substituted)
    ok: bool = False  # a valid input: must be accepted (exit 0)
    # files laid out under the case's working folder (the CLI's cwd) before it runs: path -> bytes, Link, Sparse or
    # FIFO; "{work}" in an edit's string value is that folder's absolute path
    files: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    case: Case
    verb: str
    returncode: int
    output: str
    debug_log: str
    new_files: list[Path]
    out_dir: Path
    root: Path


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    obj: Any = data
    for k in keys[:-1]:
        obj = obj[int(k)] if isinstance(obj, list) else obj.setdefault(k, {})
    last = keys[-1]
    if value is DELETE:
        if isinstance(obj, list):
            del obj[int(last)]
        else:
            obj.pop(last, None)
    elif isinstance(obj, list):
        obj[int(last)] = value
    else:
        obj[last] = value


def lay_out(case: Case, root: Path) -> dict[str, Path]:
    system_name, test_name, scenario_name = BASES[case.base]
    docs = {
        "system": toml.load(CONF / "system" / f"{system_name}.toml"),
        "test": toml.load(CONF / "test" / f"{test_name}.toml"),
        "scenario": toml.load(CONF / "test_scenario" / f"{scenario_name}.toml"),
    }
    docs = copy.deepcopy(docs)
    work = root / "work"
    for dotted, value in case.edits.items():
        if isinstance(value, str):
            value = value.replace("{work}", str(work))
        which, _, rest = dotted.partition(".")
        if not rest:
            docs[which] = value
        else:
            _set(docs[which], rest, value)
    paths = {
        "system": root / "conf" / "system" / "system.toml",
        "test": root / "conf" / "test" / "test.toml",
        "scenario": root / "conf" / "test_scenario" / "scenario.toml",
    }
    for which, path in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if which in case.raw:
            path.write_bytes(case.raw[which])
        else:
            path.write_text(toml.dumps(docs[which]))
    work.mkdir()
    for rel, content in case.files.items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is FIFO:
            os.mkfifo(path)
        elif isinstance(content, Link):
            path.symlink_to(content.target)
        elif isinstance(content, Sparse):
            with path.open("wb") as fh:
                fh.truncate(content.size)
        else:
            path.write_bytes(content)
    home = root / "home"
    home.mkdir()
    return {**paths, "conf": root / "conf", "work": work, "out": work / "out", "home": home}


def command(case: Case, verb: str, p: dict[str, Path]) -> list[str]:
    if case.argv is not None:
        return [a.format(**{k: str(v) for k, v in p.items()}) for a in case.argv]
    if verb == "verify-configs":
        return ["verify-configs", str(p["conf"]), "--system-config", str(p["system"])]
    if verb == "preflight":  # its table goes to --output-dir only when the scenario can be read
        return ["preflight", "--system-config", str(p["system"]), "--test-scenario", str(p["scenario"])]
    return [verb, "--system-config", str(p["system"]), "--test-scenario", str(p["scenario"]), "--output-dir",
            str(p["out"])]


def _files(root: Path) -> set[Path]:
    return {q for q in root.rglob("*") if q.is_file() or q.is_symlink() or q.is_fifo()}


def fork_jobs(jobs: list[dict[str, Any]], tmp: Path, workers: int | None = None) -> list[int]:
    """Run command lines ({argv, cwd, env, log}) through forkrun.py; their exit statuses, in order."""
    jobs_file, results_file = tmp / "jobs.json", tmp / "codes.json"
    jobs_file.write_text(json.dumps(jobs))
    workers = workers or max(2, (os.cpu_count() or 2) + 1)
    subprocess.run([sys.executable, str(Path(__file__).with_name("forkrun.py")), str(jobs_file), str(results_file),
                    str(workers)], check=True, timeout=1800)
    return json.loads(results_file.read_text())


def run_all(cases: Iterable[Case], tmp: Path, workers: int | None = None) -> dict[tuple[str, str], Outcome]:
    """Every (case, verb) run through forkrun.py (the CLI's main in a forked child per command line)."""
    prepared = []
    for case in cases:
        for verb in case.verbs:
            root = tmp / f"{case.id}--{verb}"
            root.mkdir(parents=True)
            p = lay_out(case, root)
            env = {**os.environ, **SECRETS, "HOME": str(p["home"]), "KUBECONFIG": str(root / "no-such-kubeconfig")}
            job = {"argv": ["--log-file", str(p["work"] / "debug.log"), *command(case, verb, p)],
                   "cwd": str(p["work"]), "env": env, "log": str(root / "terminal.txt")}
            prepared.append((case, verb, root, p, _files(root) | {root / "terminal.txt"}, job))
    codes = fork_jobs([j for *_, j in prepared], tmp, workers)
    outcomes = {}
    for (case, verb, root, p, before, _), code in zip(prepared, codes, strict=True):
        log = p["work"] / "debug.log"
        outcomes[(case.id, verb)] = Outcome(
            case=case, verb=verb, returncode=code,
            output=(root / "terminal.txt").read_text(errors="replace"),
            debug_log=log.read_text(errors="replace") if log.exists() else "",
            new_files=sorted(_files(root) - before), out_dir=p["out"], root=root,
        )
    return outcomes


def manifest_mismatches(o: Outcome) -> list[str]:
    """Kubernetes manifests a dry-run wrote that a YAML 1.1 reader does not read back as the objects.json beside them
    (kubectl's go-yaml v2 typing, k8s/yaml11.py, and PyYAML's); issue 32."""
    import yaml
    from k8s.yaml11 import load_go_yaml_v2

    found = []
    for objects_json in sorted(o.out_dir.rglob("k8s/objects.json")):
        meant = json.loads(objects_json.read_text())["items"]
        manifests = sorted(objects_json.parent.glob("*.yaml"))
        if len(manifests) != len(meant):
            found.append(f"{objects_json.parent}: {len(manifests)} manifests for {len(meant)} objects")
        for path in manifests:
            text, expected = path.read_text(), meant[int(path.name[:2])]
            found += [f"{path} ({reader})" for reader, load in (("go-yaml v2", load_go_yaml_v2),
                                                                ("PyYAML", yaml.safe_load)) if load(text) != expected]
    return found


def leaks(o: Outcome, extra: Callable[[Path], bool] | None = None) -> list[str]:
    """Secret values found in the output, debug.log or any file the run wrote."""
    secrets = [*SECRETS.values(), *([o.case.secret] if o.case.secret else [])]
    found = [f"terminal: {s}" for s in secrets if s in o.output]
    found += [f"debug.log: {s}" for s in secrets if s in o.debug_log]
    for path in o.new_files:
        if path.is_fifo() or not path.is_file() or path.stat().st_size > 1 << 30:  # a huge sparse input (issue 32)
            continue
        data = path.read_bytes()
        found += [f"{path}: {s}" for s in secrets if s.encode() in data]
    return found
