"""The "invisible characters" rows of cases.py on their own (the whole hostile suite runs them too): a bidi control,
a zero-width or other format character in a field that reaches an #SBATCH line, the srun line or a Kubernetes name
or label is refused through the real CLI (dry-run, verify-configs, preflight), shown as U+XXXX with its position."""

from __future__ import annotations

import pytest

from hostile.cases import INVISIBLE_CHARACTERS
from hostile.harness import Outcome, leaks, run_all
from hostile.test_hostile_inputs import _stray

RUNS = [(c, v) for c in INVISIBLE_CHARACTERS for v in c.verbs]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Outcome]:
    return run_all(INVISIBLE_CHARACTERS, tmp_path_factory.mktemp("invisible"))


@pytest.mark.parametrize(("case", "verb"), RUNS, ids=[f"{c.id}-{v}" for c, v in RUNS])
def test_an_invisible_character_is_refused_and_shown(outcomes: dict, case, verb: str) -> None:
    o = outcomes[(case.id, verb)]
    assert o.returncode != 0, f"accepted:\n{o.output[-2000:]}"
    assert "Traceback" not in o.output, o.output[-3000:]
    line = next((x for x in o.output.splitlines() if case.expect[1] in x), "")
    assert all(e in line for e in case.expect), o.output[-2000:]
    assert "Fix" in line and ".toml" in o.output, o.output[-2000:]
    assert [p for p in o.new_files if o.out_dir in p.parents] == []
    assert _stray(o) == [] and leaks(o) == []
