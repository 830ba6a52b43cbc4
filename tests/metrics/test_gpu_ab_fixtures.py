"""The dispatcher A/B's real GPU run folders (tests/fixtures/logs/gpu/ab_*, see SOURCES.md there) parse to the
numbers benchmarks/results/gpu_dispatcher_ab.json holds, and the script's A/B adapter (reports/ab.py on run folders)
gives the recorded deltas and winners.

The fixtures are the trimmed rank logs of ``bash benchmarks/gpu_dispatcher_run.sh 330 --iters 30`` on an H200x2:
alltoall vs flex/DeepEP through UCCL-EP's drop-in deep_ep, kimi_k2_proxy, ep 2, mbs 1 and 4, 30 iterations.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cloudai_mbridge.metrics import parse_training_run

ROOT = Path(__file__).resolve().parent.parent.parent
GPU_FIXTURES = ROOT / "tests" / "fixtures" / "logs" / "gpu"
RESULT = json.loads((ROOT / "benchmarks" / "results" / "gpu_dispatcher_ab.json").read_text())
RUNS = {r["name"]: r for r in RESULT["points"] if r["status"] == "ok"}
AB_ROWS = {r["point"]: r for r in RESULT["ab"]["rows"]}
UCCL_DEEP_EP = "/work/main/.whl/uccl/deep_ep/__init__.py"


def _ab_module():
    import gpu_dispatcher_ab  # benchmarks/ is on pytest's pythonpath

    return gpu_dispatcher_ab


def test_every_run_has_its_fixture_and_a_sources_line() -> None:
    sources = (GPU_FIXTURES / "SOURCES.md").read_text()
    assert sorted(RUNS) == ["mbs1_overlap-off_alltoall", "mbs1_overlap-off_deepep", "mbs4_overlap-off_alltoall",
                            "mbs4_overlap-off_deepep"]
    for name, row in RUNS.items():
        folder = ROOT / row["fixture"]
        assert folder.name == f"ab_{name}"
        assert (folder / "mbridge_config.json").is_file()
        assert sorted(p.name for p in (folder / "logs").iterdir()) == ["rank-0.log", "rank-1.log"]
        assert f"`{folder.name}/`" in sources, folder.name
        # Trimmed: no Python warning line is left.
        for log in (folder / "logs").iterdir():
            assert "Warning: " not in log.read_text(), log


@pytest.mark.parametrize("name", sorted(RUNS))
def test_ab_fixture_parses_to_the_recorded_numbers(name: str) -> None:
    row = RUNS[name]
    m = parse_training_run(ROOT / row["fixture"])  # default warm-up 4, as the device run
    assert m.status == "ok", m.problems
    assert m.failure.status == "ok"
    it = m.iteration_time_ms
    rec = row["iteration_ms"]
    assert (it.n, it.n_warmup, it.n_stalls) == (rec["n"], rec["n_warmup"], rec["stalls"]) == (26, 4, 0)
    assert [r.iteration for r in m.iterations] == list(range(1, 31))
    for key in ("median", "mean", "p10", "p90", "min", "max", "stdev"):
        assert getattr(it, key) == pytest.approx(rec[key]), key
    assert m.tflops_per_gpu.median == pytest.approx(row["tflops_per_gpu_median"])
    assert m.tokens_per_s.median == pytest.approx(row["tokens_per_s_median"])
    assert m.validity.nan_iterations == () and m.validity.skipped_iterations == 0
    d = m.validity.dispatcher
    assert (d.built, d.backend) == (row["dispatcher_built"], row["dispatcher_backend"])
    assert d.downgraded is False
    # The payload imports deep_ep in both arms (megatron's fused_a2a does); it is UCCL's drop-in either way.
    assert (d.deep_ep_module, d.deep_ep_provider) == (UCCL_DEEP_EP, "uccl")
    if row["arm"] == "deepep":
        assert (d.requested, d.built, d.backend) == ("deepep", "flex", "deepep")
        assert m.summary()["uccl_proxy_ranks"] == 2  # "Registered proxies for device N" on both ranks
    else:
        assert (d.requested, d.built, d.backend) == ("alltoall", "alltoall", "none")
        assert m.summary()["uccl_proxy_ranks"] == 0
    assert m.summary()["efa_ranks"] == 0  # one node over NVLink: no EFA path


def test_ab_headline_numbers() -> None:
    """The numbers the report (gpu_dispatcher_ab.md) quotes, so a regenerated results file cannot drift unnoticed."""
    medians = {n: r["iteration_ms"]["median"] for n, r in RUNS.items()}
    assert medians == pytest.approx({"mbs1_overlap-off_alltoall": 379.1, "mbs1_overlap-off_deepep": 376.8,
                                     "mbs4_overlap-off_alltoall": 984.25, "mbs4_overlap-off_deepep": 1005.7})
    one, four = AB_ROWS["mbs1_overlap-off"], AB_ROWS["mbs4_overlap-off"]
    assert (round(one["delta_pct"], 1), round(one["delta_median_pct"], 1), one["verdict"]) == (-1.1, -0.6,
                                                                                                "within noise")
    assert (round(four["delta_pct"], 1), round(four["delta_median_pct"], 1), four["verdict"]) == (1.4, 2.2,
                                                                                                  "within noise")
    assert (one["delta_ci95_pct"], four["delta_ci95_pct"]) == ("-4.8..+2.5", "-0.3..+3.2")


def test_ab_adapter_on_the_fixtures_gives_the_recorded_rows(tmp_path: Path) -> None:
    ab = _ab_module()
    # The adapter wants the script's layout: <out>/runs/<point>_<arm>/.
    folders = [shutil.copytree(ROOT / r["fixture"], tmp_path / "runs" / n) for n, r in sorted(RUNS.items())]
    rows = ab.ab_report(folders, tmp_path, warmup=RESULT["ab"]["warmup"])
    points = [{**r, "run_folder": str(tmp_path / "runs" / r["name"])} for r in RUNS.values()]
    pairs = {p["point"]: p for p in ab.pair_point(points, rows)}
    assert sorted(pairs) == sorted(AB_ROWS) == ["mbs1_overlap-off", "mbs4_overlap-off"]
    for point, got in pairs.items():
        want = AB_ROWS[point]
        assert (got["baseline"], got["arm"], got["cell"]) == (want["baseline"], want["arm"], want["cell"])
        assert (got["verdict"], got["delta_ci95_pct"]) == (want["verdict"], want["delta_ci95_pct"])
        assert ab.winner(got["verdict"]) == ab.winner(want["verdict"])
        for key in ("base_time_s", "arm_time_s", "delta_pct", "delta_median_pct", "loss_max_rel_diff"):
            assert got[key] == pytest.approx(want[key]), (point, key)
        assert (got["base_n"], got["arm_n"], got["loss_iterations_compared"]) == (26, 26, 10)
        assert got["loss_max_rel_diff"] <= 1e-3  # equal work: the verdict is allowed
        assert got["arm_deep_ep_provider"] == "uccl"
        assert Path(got["arm_run"]).name == f"{point}_deepep"
    # neither delta leaves its 95 % interval around 0: no winner at this scale
    assert {ab.winner(p["verdict"]) for p in pairs.values()} == {"none"}
    assert (tmp_path / "mbridge_ab.csv").is_file() and (tmp_path / "mbridge_ab.html").is_file()
