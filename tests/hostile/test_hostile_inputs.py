"""Issue 14: the hostile-input suite. Every row of cases.py through the real CLI (dry-run, verify-configs with the
case's system and preflight; run too for the sweep, scenario and system rows): a clean message that names the
field / value and the fix, a non-zero exit status, no traceback, nothing written (no output, no foreign file), no
secret printed or written. Valid rows must still be accepted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hostile.cases import CASES, VALID
from hostile.harness import Outcome, leaks, manifest_mismatches, run_all

HOSTILE_RUNS = [(c, v) for c in CASES for v in c.verbs]
VALID_RUNS = [(c, v) for c in VALID for v in c.verbs]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Outcome]:
    return run_all([*CASES, *VALID], tmp_path_factory.mktemp("hostile"))


def _stray(o: Outcome) -> list[Path]:
    """Files the run wrote anywhere but its --output-dir, its debug.log and the captured terminal."""
    allowed = {o.root / "terminal.txt", o.root / "work" / "debug.log"}
    return [p for p in o.new_files if p not in allowed and o.out_dir not in p.parents]


def test_the_suite_covers_at_least_150_inputs() -> None:
    assert len(CASES) >= 150
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "verb"), HOSTILE_RUNS, ids=[f"{c.id}-{v}" for c, v in HOSTILE_RUNS])
def test_hostile_input_is_refused_cleanly(outcomes: dict, case, verb: str) -> None:
    o = outcomes[(case.id, verb)]
    assert o.returncode != 0, f"accepted:\n{o.output[-2000:]}"
    assert "Traceback" not in o.output, o.output[-3000:]
    missing = [e for e in case.expect if e not in o.output]
    assert not missing, f"the message does not name {missing}:\n{o.output[-2000:]}"
    assert "Fix" in o.output or "Try '" in o.output, f"no fix offered:\n{o.output[-2000:]}"
    written = [p for p in o.new_files if o.out_dir in p.parents]
    assert written == [], f"left behind: {written}"
    assert _stray(o) == []
    assert leaks(o) == []


@pytest.mark.parametrize(("case", "verb"), VALID_RUNS, ids=[f"{c.id}-{v}" for c, v in VALID_RUNS])
def test_valid_input_is_still_accepted(outcomes: dict, case, verb: str) -> None:
    o = outcomes[(case.id, verb)]
    assert o.returncode == 0, o.output[-3000:]
    assert "Traceback" not in o.output
    if verb == "dry-run":
        assert any(p.name in ("cloudai_sbatch_script.sh", "objects.json") for p in o.new_files)
        assert manifest_mismatches(o) == [], "a manifest does not read back as objects.json (YAML 1.1 typing)"
    elif verb == "preflight":
        assert "point(s) accepted" in o.output and "dry-run and run would refuse" not in o.output
    else:
        assert re.search(r"pass(es)? dry-run's checks", o.output), o.output[-2000:]
    assert _stray(o) == []
    assert leaks(o) == []
