"""The "reserved env names" rows of cases.py on their own (the whole hostile suite runs them too, with every other
row): each through the real CLI (dry-run, verify-configs, preflight), refused in a line that names the table, the name
and the fix; the valid rows (LD_PRELOAD, PYTHONPATH) still accepted, PYTHONPATH kept behind the payload's folder."""

from __future__ import annotations

import json

import pytest

from hostile.cases import RESERVED_ENV_NAMES, VALID
from hostile.harness import Outcome, leaks, run_all
from hostile.test_hostile_inputs import _stray

OK_ROWS = [c for c in VALID if c.id.startswith(("valid-env-name-", "valid-k8s-env-name-"))]
RUNS = [(c, v) for c in RESERVED_ENV_NAMES for v in c.verbs]
OK_RUNS = [(c, v) for c in OK_ROWS for v in c.verbs]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Outcome]:
    return run_all([*RESERVED_ENV_NAMES, *OK_ROWS], tmp_path_factory.mktemp("envnames"))


@pytest.mark.parametrize(("case", "verb"), RUNS, ids=[f"{c.id}-{v}" for c, v in RUNS])
def test_a_reserved_name_is_refused_in_one_line(outcomes: dict, case, verb: str) -> None:
    o = outcomes[(case.id, verb)]
    assert o.returncode != 0, f"accepted:\n{o.output[-2000:]}"
    assert "Traceback" not in o.output, o.output[-3000:]
    lines = [line for line in o.output.splitlines() if "[env-name]" in line]
    assert lines, o.output[-2000:]
    name = next(iter(case.edits.values()))
    name = next(iter(name)) if isinstance(name, dict) else next(iter(case.edits)).rsplit(".", 1)[-1]
    assert all(e in lines[0] for e in case.expect), lines[0]
    assert f"Fix: remove {name}" in lines[0], lines[0]
    # dry-run and verify-configs name the files on the line; preflight's table under its heading
    assert "system.toml" in (lines[0] if verb != "preflight" else o.output), o.output[-2000:]
    assert [p for p in o.new_files if o.out_dir in p.parents] == []
    assert _stray(o) == [] and leaks(o) == []


@pytest.mark.parametrize(("case", "verb"), OK_RUNS, ids=[f"{c.id}-{v}" for c, v in OK_RUNS])
def test_allowed_names_are_accepted(outcomes: dict, case, verb: str) -> None:
    o = outcomes[(case.id, verb)]
    assert o.returncode == 0, o.output[-3000:]
    if verb != "dry-run":
        return
    scripts = [p for p in o.new_files if p.name == "cloudai_sbatch_script.sh"]
    if "pythonpath" in case.id and scripts:
        lines = scripts[0].read_text().splitlines()
        mine = lines.index("export PYTHONPATH=/opt/extra")
        assert lines[mine + 1].startswith("export PYTHONPATH=/") and lines[mine + 1].endswith(
            '"${PYTHONPATH:+:$PYTHONPATH}"'), "the payload's folder goes in front of the file's PYTHONPATH"
    for objects in (p for p in o.new_files if p.name == "objects.json"):
        for item in json.loads(objects.read_text())["items"]:
            for pod in _pod_specs(item):
                for c in pod["containers"]:
                    paths = [e["value"] for e in c.get("env", []) if e["name"] == "PYTHONPATH"]
                    assert paths == ["/opt/cloudai-mbridge:/opt/extra"], paths


def _pod_specs(obj: object) -> list[dict]:
    if isinstance(obj, dict):
        if "containers" in obj:
            return [obj]
        return [s for v in obj.values() for s in _pod_specs(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _pod_specs(v)]
    return []
