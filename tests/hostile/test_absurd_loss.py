"""Issue 46 (6): a loss that is finite but no language model can have (1e30, a negative one, 100 on a 163,840-token
vocabulary) gives no verdict, as NaN gives none: the run's log is inconsistent (named reason, iteration and range),
its A/B arm is gated, and a golden-values file holding one is refused. A real GPU run's log (fixtures) is edited."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from cloudai_mbridge.metrics import parse_training_run
from cloudai_mbridge.metrics.golden import GoldenFileError, read_golden_file
from cloudai_mbridge.metrics.loss import ceiling, loss_problem
from cloudai_mbridge.reports.ab import Arm

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "gpu" / "train_k2_1gpu"
VOCAB = json.loads((RUN / "mbridge_config.json").read_text())["model"]["vocab_size"]


def _run_with_loss(tmp: Path, iteration: int, loss: str) -> Path:
    run = tmp / "run"
    shutil.copytree(RUN, run)
    log = run / "logs" / "rank-0.log"
    text = log.read_text()
    pattern = rf"(iteration\s+{iteration}/[^\n]*?lm loss: )[^ |]+"
    edited, n = re.subn(pattern, lambda m: m.group(1) + loss, text)
    assert n == 1
    log.write_text(edited)
    return run


def test_the_real_run_itself_is_consistent(tmp_path: Path) -> None:
    m = parse_training_run(RUN)
    assert "inconsistent_log" not in m.problems and m.inconsistencies == ()


@pytest.mark.parametrize("loss", ["1.000000E+30", "-2.500000E+00", "1.000000E+02", "-0.000001"])
def test_an_absurd_loss_makes_the_log_inconsistent_and_gates_the_arm(tmp_path: Path, loss: str) -> None:
    m = parse_training_run(_run_with_loss(tmp_path, 3, loss))
    assert "inconsistent_log" in m.problems and not m.ok
    text = " ".join(m.inconsistencies)
    assert "iteration 3" in text and f"lm loss {float(loss):g}" in text, text
    assert f"ln({VOCAB:,})" in text
    gates = Arm("a", tmp_path / "run", m.config, m).gates()
    assert gates and "lm loss" in gates[0], gates


def test_a_loss_within_the_range_stays_a_measurement(tmp_path: Path) -> None:
    top = ceiling(VOCAB)
    assert 3 * math.log(VOCAB) == pytest.approx(top)
    m = parse_training_run(_run_with_loss(tmp_path, 3, f"{top * 0.99:.6E}"))
    assert "inconsistent_log" not in m.problems, m.inconsistencies
    assert loss_problem(0.0, VOCAB) is None and loss_problem(float("nan"), VOCAB) is None, "NaN has its own finding"


@pytest.mark.parametrize("loss", [1e30, -1.0, 1e3])
def test_a_golden_file_with_an_absurd_loss_is_refused(tmp_path: Path, loss: float) -> None:
    path = tmp_path / "golden.json"
    path.write_text(json.dumps({"0": {"lm loss": 10.4}, "1": {"lm loss": loss}}))
    with pytest.raises(GoldenFileError, match=r"step 1: lm loss .* language model's cross-entropy"):
        read_golden_file(path)
    path.write_text(json.dumps({"0": {"lm loss": 10.4}, "1": {"lm loss": 10.3}}))
    assert read_golden_file(path)["1"]["lm loss"] == 10.3
