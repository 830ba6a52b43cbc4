"""CloudAI's own test suite, with the plugin installed and without it: only the inventory counts may differ.

Both runs use this interpreter (the plugin installed) and CloudAI's tests at the pinned commit (conftest.py), each in
its own copy of the tree, in parallel. The baseline runs with ``CLOUDAI_MBRIDGE_AUTOLOAD=0``, under which nothing of
the plugin is imported (tests/test_registration.py::test_switched_off_nothing_of_the_plugin_is_imported), so it is
CloudAI alone. Every test whose outcome differs must be in ALLOWED, with the reason and the text its failure shows;
an entry that no longer differs fails too (the list says what is true, not what once was). The summary of both runs
is printed whatever the verdict, so CI shows it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pytest

from cloudai_guest.lockpins import lock_pins

# test id -> (why the plugin changes it, what its failure says when the plugin is the reason)
ALLOWED: dict[str, tuple[str, str]] = {
    "tests.test_init::test_definitions": (
        "counts CloudAI's 28 test templates; the plugin adds MBridgeTraining, MBridgeRefit, MBridgeDispatchBench",
        r"assert 31 == 28"),
    "tests.test_init::test_command_gen_strategies": (
        "lists every (system, test) command strategy; the plugin adds its own tests' (Slurm x 3, standalone x 1)",
        r"Extra: \{[^}]*MBridge"),
    "tests.test_init::test_json_gen_strategies": (
        "lists every (system, test) JSON strategy; the plugin adds its own tests' on its own Kubernetes system type",
        r"Extra: \{'\(MBridgeKubernetesSystem, MBridge"),
    "tests.test_init::test_scenario_reports": (
        "lists the scenario reports; the plugin adds mbridge_ab and mbridge_refit (silent where a scenario has none "
        "of its tests)", r"mbridge_ab"),
    "tests.test_init::test_report_configs": (
        "lists the scenario reports' default configs; the plugin adds mbridge_ab's and mbridge_refit's",
        r"mbridge_ab"),
    "tests.test_test_scenario.TestReporters::test_default_reporters_size": (
        "counts the test templates with a per-test report (22); the plugin adds MBridgeTraining's and MBridgeRefit's",
        r"assert 24 == 22"),
    "tests.test_init::test_systems": (
        "counts the system types (5); the plugin adds its own Kubernetes system type, scheduler mbridge_kubernetes "
        "(its jobs are several objects; CloudAI's kubernetes stays CloudAI's)", r"mbridge_kubernetes"),
    "tests.test_init::test_runners": (
        "counts the runners (5); the plugin adds the runner of its mbridge_kubernetes system type",
        r"mbridge_kubernetes"),
}


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id (classname::name) -> (passed | failed | error | skipped, the failure's text)."""
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome, text = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                text = f"{node.get('message', '')}\n{node.text or ''}"
                break
        found[test_id] = (outcome, text)
    return found


def counts(found: dict[str, tuple[str, str]]) -> str:
    tally: dict[str, int] = {}
    for outcome, _ in found.values():
        tally[outcome] = tally.get(outcome, 0) + 1
    return ", ".join(f"{tally.get(k, 0)} {k}" for k in ("passed", "failed", "error", "skipped"))


def verdict(alone: dict[str, tuple[str, str]], plugged: dict[str, tuple[str, str]],
            allowed: dict[str, tuple[str, str]]) -> list[str]:
    """What is wrong: a difference not in ``allowed``, an allowed one failing for another reason, a stale entry."""
    problems = []
    differing = {t for t in alone.keys() | plugged.keys()
                 if alone.get(t, ("absent", ""))[0] != plugged.get(t, ("absent", ""))[0]}
    for t in sorted(differing):
        before, after = alone.get(t, ("absent", ""))[0], plugged.get(t, ("absent", ""))
        if t not in allowed:
            problems.append(f"{t}: {before} under CloudAI alone, {after[0]} with the plugin (not an allowed "
                            f"inventory count): {after[1].strip()[:600]}")
        elif not re.search(allowed[t][1], after[1]):
            problems.append(f"{t}: differs, but its failure does not show what ALLOWED expects "
                            f"({allowed[t][1]!r}): {after[1].strip()[:600]}")
    for t in sorted(set(allowed) - differing):
        problems.append(f"{t}: listed in ALLOWED but the same with and without the plugin "
                        f"({plugged.get(t, ('absent', ''))[0]}): remove the entry")
    return problems


def _run_suite(tree: Path, junit: Path, autoload: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["CLOUDAI_MBRIDGE_AUTOLOAD"] = autoload
    env["PWD"] = str(tree)  # a test of CloudAI's mounts $PWD and expects the tree it runs in
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"],
        cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_verdict_finds_every_kind_of_difference() -> None:
    """The comparison can fail: an unlisted difference, a listed one failing for another reason, a stale entry."""
    alone = {"a::x": ("passed", ""), "a::y": ("passed", ""), "a::z": ("failed", "root"), "a::w": ("passed", "")}
    plugged = {"a::x": ("failed", "assert 31 == 28"), "a::y": ("failed", "boom"), "a::z": ("failed", "root"),
               "a::w": ("passed", "")}
    allowed = {"a::x": ("count", r"31 == 28"), "a::w": ("count", r"\d+ == \d+")}
    problems = verdict(alone, plugged, allowed)
    assert len(problems) == 2 and problems[0].startswith("a::y: passed under CloudAI alone, failed with the plugin")
    assert "a::w: listed in ALLOWED but the same" in problems[1]
    wrong_reason = verdict(alone, plugged, {**allowed, "a::x": ("count", r"99 == 1")})
    assert any(p.startswith("a::x: differs, but its failure does not show") for p in wrong_reason)
    assert verdict(alone, {**plugged, "a::y": ("passed", "")}, {"a::x": ("count", r"31 == 28")}) == []


def test_cloudai_suite_with_the_plugin_differs_only_in_inventory_counts(
        cloudai_src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pins = lock_pins(cloudai_src / "uv.lock")
    have = {name: metadata.version(name) for name in pins if _installed(name)}
    assert have == pins, (
        f"CloudAI's suite needs {pins} as its uv.lock pins them (this interpreter has {have}). Fix: "
        f"{sys.executable} -m pip install {' '.join(f'{n}=={v}' for n, v in pins.items())}")
    trees = {"alone": tmp_path / "alone", "plugged": tmp_path / "plugged"}
    for tree in trees.values():
        shutil.copytree(cloudai_src, tree, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    started = time.monotonic()
    procs = {name: _run_suite(tree, tmp_path / f"{name}.xml", "0" if name == "alone" else "1")
             for name, tree in trees.items()}
    tails = {name: (p.communicate(timeout=1200)[0] or "").strip().splitlines()[-1:] for name, p in procs.items()}
    took = time.monotonic() - started
    alone, plugged = outcomes(tmp_path / "alone.xml"), outcomes(tmp_path / "plugged.xml")
    problems = verdict(alone, plugged, ALLOWED)
    differing = sorted(t for t in ALLOWED if t not in {p.split(":")[0] for p in problems})
    with capsys.disabled():
        print(f"\nCloudAI's own suite ({cloudai_src.name}, pytest {pins['pytest']}), both runs in parallel, "
              f"{took:.0f} s wall:")
        print(f"  CloudAI alone (CLOUDAI_MBRIDGE_AUTOLOAD=0): {counts(alone)}  [{' '.join(tails['alone'])}]")
        print(f"  CloudAI + cloudai-mbridge:                  {counts(plugged)}  [{' '.join(tails['plugged'])}]")
        print(f"  differing, all allowed inventory counts ({len(differing)}):")
        for t in differing:
            print(f"    {t}: {ALLOWED[t][0]}")
        for p in problems:
            print(f"  NOT ALLOWED: {p}")
    assert alone and plugged, f"a run wrote no results: {tails}"
    assert not problems, "\n".join(problems)


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True
