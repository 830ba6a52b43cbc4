"""Golden values (Megatron-Bridge scripts/performance/utils/evaluate.py) on real Bridge runs from one H100.

Expected numbers are computed here from the log text with a plain regex, independently of the extractor, and the
checks' verdicts follow from Bridge's thresholds by hand (noted beside each)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from cloudai_mbridge.metrics import GoldenThresholds, compare_golden, golden_values, parse_training_run
from cloudai_mbridge.metrics.golden import pearson

BRIDGE = Path(__file__).parent.parent / "fixtures" / "logs" / "bridge"
RUNS = Path(__file__).parent.parent.parent / "benchmarks" / "results" / "bridge" / "runs"
LINE = re.compile(r"iteration\s+(\d+)/.*?\(ms\): ([\d.]+) \|.*?TFLOP/s/GPU\): ([\d.]+) \|.*?lm loss: ([\d.E+-]+) \|")


def log_values(run: Path) -> dict[int, tuple[float, float, float]]:
    """step (iteration - 1) -> (ms, TFLOP/s, loss), straight from the text."""
    out = {}
    for line in (run / "logs" / "rank-0.log").read_text().splitlines():
        if m := LINE.search(line):
            out[int(m.group(1)) - 1] = (float(m.group(2)), float(m.group(3)), float(m.group(4)))
    return out


@pytest.fixture(scope="module")
def bf16():
    return parse_training_run(BRIDGE / "te_dsv3_bf16")


def write(tmp_path: Path, values: dict, name: str = "golden.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(values))
    return path


def scaled(values: dict, key: str, factor: float, steps=None) -> dict:
    out = json.loads(json.dumps(values))
    for step, entry in out.items():
        if isinstance(entry, dict) and (steps is None or int(step) in steps):
            entry[key] *= factor
    return out


def test_golden_file_is_bridges_format(bf16):
    values = golden_values(bf16)
    text = log_values(BRIDGE / "te_dsv3_bf16")
    assert len(text) == 40
    assert values["0"] == {"lm loss": 10.43445, "elapsed time per iteration (ms)": 11827.7, "GPU utilization": 3.8}
    for step, (ms, tf, loss) in text.items():
        assert values[str(step)] == {"lm loss": loss, "elapsed time per iteration (ms)": ms, "GPU utilization": tf}
    # Bridge's alloc / max_alloc: the first mem-allocated / mem-max-allocated-gigabytes; ours: the run's peak
    assert values["alloc"] == pytest.approx(9.509) and values["max_alloc"] == pytest.approx(9.509)
    assert values["peak_max_alloc"] == pytest.approx(10.188)


def test_a_run_matches_its_own_golden_file(bf16, tmp_path):
    result = compare_golden(bf16, write(tmp_path, golden_values(bf16)))
    assert result.passed and result.reason is None and result.steps_compared == 40
    names = [c.name for c in result.checks]
    assert names == ["correlation", "point_wise_tolerance", "final_loss", "outliers", "step_timing", "tflops",
                     "alloc", "max_alloc", "peak_max_alloc"]


def test_step_time_regression_and_unexpected_improvement(bf16, tmp_path):
    text = log_values(BRIDGE / "te_dsv3_bf16")
    # Bridge skips max(1, int(40 * 0.1)) = 4 steps; the mean of steps 4..39 from the text:
    mean = math.fsum(text[s][0] for s in range(4, 40)) / 36
    golden = golden_values(bf16)
    faster_golden = compare_golden(bf16, write(tmp_path, scaled(golden, "elapsed time per iteration (ms)", 0.9)))
    (check,) = [c for c in faster_golden.checks if c.name == "step_timing"]
    # |m - 0.9 m| / 0.9 m = 1/9 = 11.1 % > 5 %: this run is slower than its reference
    assert not check.passed and check.direction == "regression" and check.value == pytest.approx(1 / 9)
    assert f"{mean:.1f} vs golden {0.9 * mean:.1f} ms" in check.detail
    assert not faster_golden.passed and "step time regression" in faster_golden.reason
    slower_golden = compare_golden(bf16, write(tmp_path, scaled(golden, "elapsed time per iteration (ms)", 1.2)))
    (check,) = [c for c in slower_golden.checks if c.name == "step_timing"]
    # |m - 1.2 m| / 1.2 m = 1/6 = 16.7 %: faster than the reference is flagged too, and says so
    assert not check.passed and check.direction == "unexpected improvement"
    assert check.value == pytest.approx(1 / 6)
    # 4 % slower is inside Bridge's 5 %
    ok = compare_golden(bf16, write(tmp_path, scaled(golden, "elapsed time per iteration (ms)", 1 / 1.04)))
    assert ok.passed


def test_tflops_regression(bf16, tmp_path):
    golden = scaled(golden_values(bf16), "GPU utilization", 1.1)
    result = compare_golden(bf16, write(tmp_path, golden))
    (check,) = result.breaches
    # |t - 1.1 t| / 1.1 t = 9.1 % lower throughput than the reference
    assert check.name == "tflops" and check.direction == "regression" and check.value == pytest.approx(0.1 / 1.1)


def test_loss_tolerance_by_magnitude_and_outlier_ratio(bf16, tmp_path):
    t = GoldenThresholds()
    assert (t.loss_tolerance(2.01), t.loss_tolerance(2.0), t.loss_tolerance(0.5)) == (0.10, 0.05, 0.02)
    golden = golden_values(bf16)
    # losses 10.4..4.2 are all above 2.0: tolerance 10 %. Golden x1.2 gives |c - 1.2c| / 1.2c = 16.7 % per step.
    four = compare_golden(bf16, write(tmp_path, scaled(golden, "lm loss", 1.2, steps=range(10, 14))))
    assert four.passed  # 4/40 = 10 %, not above Bridge's max_outlier_ratio 0.1
    five = compare_golden(bf16, write(tmp_path, scaled(golden, "lm loss", 1.2, steps=range(10, 15))))
    (check,) = [c for c in five.checks if c.name == "point_wise_tolerance"]
    assert not check.passed and check.value == pytest.approx(5 / 40)
    assert "5/40 steps outside the loss tolerance" in five.reason and "first: step 10" in five.reason
    # final loss x1.04: 0.04 / 1.04 = 3.8 % > 3 %, although one step in 40 is within the outlier ratio
    final = compare_golden(bf16, write(tmp_path, scaled(golden, "lm loss", 1.04, steps={39})))
    assert [c.name for c in final.breaches] == ["final_loss"]
    assert final.breaches[0].value == pytest.approx(0.04 / 1.04)


def test_two_real_runs_compared(bf16, tmp_path):
    """bf16 against an fp8 golden run of the same proxy (both real): the curves correlate, the values do not."""
    fp8 = parse_training_run(RUNS / "te_dsv3_fp8")
    result = compare_golden(bf16, write(tmp_path, golden_values(fp8)))
    a, b = log_values(BRIDGE / "te_dsv3_bf16"), log_values(RUNS / "te_dsv3_fp8")
    cur, gold = [a[s][2] for s in range(40)], [b[s][2] for s in range(40)]
    import numpy as np

    (corr,) = [c for c in result.checks if c.name == "correlation"]
    assert corr.value == pytest.approx(float(np.corrcoef(cur, gold)[0, 1]), rel=1e-12)
    assert corr.passed == (corr.value >= 0.95)
    outside = sum(abs(c - g) / g > 0.10 for c, g in zip(cur, gold, strict=True))
    (pw,) = [c for c in result.checks if c.name == "point_wise_tolerance"]
    assert pw.value == pytest.approx(outside / 40) and not pw.passed
    assert not result.passed and "final loss" in result.reason


def test_memory_regression(bf16, tmp_path):
    golden = golden_values(bf16)
    golden["peak_max_alloc"] = 10.188 / 1.06  # this run holds 6 % more than the reference: > 5 %
    result = compare_golden(bf16, write(tmp_path, golden))
    (check,) = result.breaches
    assert check.name == "peak_max_alloc" and check.direction == "regression"
    assert check.value == pytest.approx(0.06)


def test_bridge_written_file_and_missing_steps(bf16, tmp_path):
    # the shape of Megatron-Bridge's own test file (tests/.../test_evaluate.py): two steps, alloc and max_alloc
    bridge = {"0": {"lm loss": 10.43445, "elapsed time per iteration (ms)": 11827.7, "GPU utilization": 3.8},
              "1": {"lm loss": 10.43538, "elapsed time per iteration (ms)": 877.3, "GPU utilization": 51.4},
              "alloc": 9.509, "max_alloc": 9.509}
    result = compare_golden(bf16, write(tmp_path, bridge))
    assert result.passed and result.steps_compared == 2
    bridge["45"] = {"lm loss": 3.0, "elapsed time per iteration (ms)": 600.0, "GPU utilization": 70.0}
    result = compare_golden(bf16, write(tmp_path, bridge))
    assert not result.passed and "1 golden step(s) without a loss in this run (first: step 45)" in result.reason


def test_missing_or_bad_golden_file_fails_with_the_reason(bf16, tmp_path):
    missing = compare_golden(bf16, tmp_path / "nope.json")
    assert not missing.passed and "not found" in missing.reason and "golden_values.json" in missing.reason
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert "cannot read" in compare_golden(bf16, tmp_path / "bad.json").reason


def test_pearson_is_numpys():
    import numpy as np

    xs, ys = [1.0, 2.0, 4.0, 3.5], [2.0, 2.5, 3.9, 4.4]
    assert pearson(xs, ys) == pytest.approx(float(np.corrcoef(xs, ys)[0, 1]), rel=1e-12)
    assert math.isnan(pearson([1.0, 1.0], [2.0, 3.0]))


def test_a_damaged_golden_file_never_raises_and_keeps_nan() -> None:
    """Issue 14: keys that are not plain step numbers ("²" passes str.isdigit but int() raises; 5000 digits exceed
    int()'s limit) are skipped; a NaN loss stays so a diverged run fails the comparison."""
    import math

    from cloudai_mbridge.metrics.golden import step_values

    values = {"1": {"lm loss": 2.0}, "²": {"lm loss": 1.0}, "9" * 5000: {"lm loss": 1.0}, "2": {"lm loss": True},
              "3": {"lm loss": float("nan")}, "4": "not a table", "-1": {"lm loss": 3.0}}
    out = step_values(values, "lm loss")
    assert set(out) == {1, 3, -1} and out[1] == 2.0 and math.isnan(out[3])


# --- issue 26: a golden file is read whole or refused, never hangs nor recurses without end -----------------------
@pytest.mark.parametrize(("content", "said"), [
    (None, "not found"),
    ("fifo", "is not a regular file"),
    ("dir", "is not a regular file"),
    (50 << 20, "is 50 MiB; a golden file is at most 16 MiB"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"\xff\xfe", "not UTF-8"),
    (b"{not json", "is not JSON"),
    (b"[1, 2]", "not a JSON object of steps"),
    (b'{"0": {"lm loss": [1.0]}}', "step '0' holds a table or list under 'lm loss'"),
    (b'{"alloc": [1]}', "'alloc' holds a list"),
    (b'{"0": {"elapsed time per iteration (ms)": 5.0}}', "has no per-step 'lm loss'"),
])
def test_an_unusable_golden_file_is_refused_with_the_reason(tmp_path, content, said):
    import os

    from cloudai_mbridge.metrics.golden import GoldenFileError, golden_file_problem, read_golden_file

    path = tmp_path / "golden.json"
    if content == "fifo":
        os.mkfifo(path)
    elif content == "dir":
        path.mkdir()
    elif isinstance(content, int):
        path.touch()
        os.truncate(path, content)
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(GoldenFileError, match=re.escape(said)) as exc:
        read_golden_file(path)
    assert golden_file_problem(path) == str(exc.value)


def test_too_many_steps_are_refused(tmp_path):
    from cloudai_mbridge.metrics.golden import MAX_GOLDEN_STEPS, golden_file_problem

    path = tmp_path / "golden.json"
    path.write_text(json.dumps({str(i): {"lm loss": 1.0} for i in range(MAX_GOLDEN_STEPS + 1)}))
    assert golden_file_problem(path) == f"holds {MAX_GOLDEN_STEPS + 1:,} steps; at most {MAX_GOLDEN_STEPS:,}"
    path.write_text(json.dumps({str(i): {"lm loss": 1.0} for i in range(MAX_GOLDEN_STEPS)}))
    assert golden_file_problem(path) is None
