"""Per-test reports and the scenario A/B report, from a results tree made by a real dry-run plus log text in the
exact format Megatron prints (tests/fixtures/logs/megatron_lm_756_mixtral_moe.log is the real source)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from helpers import CONF, dry_run, run_cli, sbatch_scripts, write_case

AB_TEST = """name = "case"
description = "proxy A/B"
test_template_name = "MBridgeTraining"
[cmd_args]
model = "kimi_k2_proxy"
gpu = "h100"
tp = 1
ep = 8
gbs = 16
mbs = [1, 2]
dispatcher = ["alltoall", "deepep"]
train_iters = 12
"""
SCENARIO = 'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n'


def iteration_line(i: int, total: int, ms: float, loss: float) -> str:
    return (
        f" [2026-11-22 10:00:{i:02d}] iteration {i:8d}/{total:8d} | consumed samples: {16 * i:12d} | "
        f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {1000.0 / ms * 100:.1f} | "
        f"learning rate: 1.000000E-05 | global batch size:    16 | lm loss: {loss:.6E} | "
        "load_balancing_loss: 1.000000E+00 | loss scale: 1.0 | grad norm: 1.234 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def fake_run(run: Path, times: list[float], losses: list[float], built: str) -> None:
    config = json.loads((run / "mbridge_config.json").read_text())
    world = config["world_size"]
    logs = run / "logs"
    logs.mkdir(exist_ok=True)
    backend = "deepep" if built == "flex" else "none"
    for rank in range(world):
        lines = [f"rank {rank} up"]
        if rank == 0:
            lines += [f"MBRIDGE_DISPATCHER requested={config['dispatcher']} built={built} backend={backend}",
                      "MBRIDGE_DEEP_EP module=none provider=none"]
        if rank == world - 1:
            lines += [iteration_line(i + 1, len(times), t, loss) for i, (t, loss) in enumerate(zip(times, losses,
                                                                                                     strict=True))]
        (logs / f"rank-{rank}.log").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def ab_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_ab_results(tmp_path_factory.mktemp("ab"))


def build_ab_results(tmp: Path) -> tuple[Path, Path]:
    """A dry-run A/B (2 mbs x 2 dispatchers) with logs in Megatron's format, then generate-report."""
    _, scenario = write_case(tmp, AB_TEST, SCENARIO)
    res = dry_run(CONF / "system" / "slurm_h100_ib.toml", scenario, tmp)
    assert res.returncode == 0, res.output
    runs = {}
    for script in sbatch_scripts(res.output_dir):
        c = json.loads((script.parent / "mbridge_config.json").read_text())
        runs[(c["mbs"], c["dispatcher"])] = script.parent
    assert len(runs) == 4
    base_loss = [11.0 - 0.1 * i for i in range(12)]
    # mbs 1: deepep 20 % faster, same work (relative loss difference 1e-4).
    fake_run(runs[(1, "alltoall")], [9000, 6000, 6000, 6000] + [5000] * 8, base_loss, "alltoall")
    fake_run(runs[(1, "deepep")], [9000, 6000, 6000, 6000] + [4000] * 8, [x * (1 + 1e-4) for x in base_loss], "flex")
    # mbs 2: the deepep arm was silently built as alltoall: invalid, whatever its time.
    fake_run(runs[(2, "alltoall")], [8000] * 4 + [3000] * 8, base_loss, "alltoall")
    fake_run(runs[(2, "deepep")], [8000] * 4 + [2000] * 8, base_loss, "alltoall")
    root = next(res.output_dir.iterdir())
    proc = run_cli("generate-report", "--system-config", str(CONF / "system" / "slurm_h100_ib.toml"),
                   "--test-scenario", str(scenario), "--result-dir", str(root), cwd=tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, runs[(1, "alltoall")]


def test_ab_table_has_hand_computed_numbers(ab_results: tuple[Path, Path]) -> None:
    root, _ = ab_results
    with (root / "mbridge_ab.csv").open() as f:
        rows = {r["cell"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"mbs=1", "mbs=2"}
    good = rows["mbs=1"]
    assert (good["baseline"], good["arm"]) == ("alltoall", "deepep")
    assert float(good["base_time_s"]) == pytest.approx(5.0)
    assert float(good["arm_time_s"]) == pytest.approx(4.0)
    assert float(good["delta_pct"]) == pytest.approx(-20.0)
    assert good["verdict"] == "deepep faster"
    assert float(good["loss_max_rel_diff"]) == pytest.approx(1e-4, rel=1e-3)
    assert int(good["loss_iterations_compared"]) == 10
    assert int(good["base_n"]) == 8 and int(good["arm_stalls"]) == 0
    bad = rows["mbs=2"]
    assert bad["verdict"].startswith("invalid") and "dispatcher downgraded (deepep -> alltoall)" in bad["verdict"]
    html = (root / "mbridge_ab.html").read_text()
    assert "deepep faster" in html and "data:image/png;base64," in html


def test_per_test_report_writes_csv_plot_and_metric(ab_results: tuple[Path, Path]) -> None:
    _, run = ab_results
    with (run / "mbridge_iterations.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 and rows[-1]["steady"] == "True" and rows[0]["steady"] == "False"
    assert (run / "mbridge_iterations.png").stat().st_size > 1000
    summary = json.loads((run / "mbridge_summary.json").read_text())
    assert summary["metrics"]["iteration-time"] == pytest.approx(5.0)
    assert summary["metrics"]["tokens-per-second"] == pytest.approx(16 * 4096 / 5.0)


def test_refit_metric_is_withheld_when_verification_failed(tmp_path: Path) -> None:
    from cloudai.core import METRIC_ERROR
    from helpers import slurm_strategy

    from cloudai_mbridge.workloads.reporting import MBridgeRefitReport

    out = tmp_path / "run"
    strategy = slurm_strategy(CONF / "system" / "local_slurm.toml", CONF / "test" / "refit_cpu_smoke.toml", 2, out,
                              {"dst": {"tp": 1, "ep": 4, "etp": 1}})
    strategy.gen_exec_command()
    (out / "logs").mkdir()
    result = {"refit_time_ms": None, "bandwidth_gbps": None}
    (out / "logs" / "rank-0.log").write_text(
        "REFIT_STATS bytes_remote=100 bytes_local=20 send_ops=4 recv_ops=4\n"
        "REFIT_VERIFY status=fail params=12 mismatched=1 detail=decoder.layers.0.mlp\n"
        f"REFIT_RESULT {json.dumps(result)}\n"
    )
    for rank in (1, 2, 3):
        (out / "logs" / f"rank-{rank}.log").write_text("ok\n")
    report = MBridgeRefitReport(strategy.system, strategy.test_run)
    assert report.can_handle_directory()
    assert report.get_metric("refit-time") is METRIC_ERROR
    status = strategy.test_run.test.was_run_successful(strategy.test_run)
    assert not status.is_successful and "verification failed (1 of 12 parameters differ)" in status.error_message


def test_delta_interval_is_welchs_by_hand() -> None:
    from cloudai_mbridge.metrics.stats import Stats
    from cloudai_mbridge.reports.ab import delta_interval

    base = Stats(n=10, mean=100.0, stdev=10.0)
    arm = Stats(n=10, mean=90.0, stdev=10.0)
    # se = sqrt(100/10 + 100/10) = 4.472, df = 18, t(0.975, 18) = 2.101: -10 +- 9.40 ms of a 100 ms baseline
    lo, hi = delta_interval(base, arm)
    assert (lo, hi) == (pytest.approx(-19.40, abs=0.01), pytest.approx(-0.60, abs=0.01))
    assert delta_interval(base, Stats(n=1, mean=90.0, stdev=0.0)) is None  # one iteration: no interval


def test_scenario_page_has_runs_with_status_failure_mfu_and_facts(ab_results: tuple[Path, Path]) -> None:
    root, _ = ab_results
    with (root / "mbridge_runs.csv").open() as f:
        runs = {r["point"]: r for r in csv.DictReader(f)}
    assert set(runs) == {"dispatcher=alltoall mbs=1", "dispatcher=deepep mbs=1", "dispatcher=alltoall mbs=2",
                         "dispatcher=deepep mbs=2"}
    ok = runs["dispatcher=alltoall mbs=1"]
    assert ok["status"] == "ok" and ok["failure"] == ""
    assert float(ok["iter_ms"]) == pytest.approx(5000.0)
    assert float(ok["tflops_per_gpu"]) == pytest.approx(20.0)  # 1000 / 5000 ms x 100
    assert float(ok["mfu_pct"]) == pytest.approx(20.0 / 989.5 * 100)  # h100 dense BF16 peak
    assert float(ok["tokens_per_s_per_gpu"]) == pytest.approx(16 * 4096 / 5.0 / 8)
    # 8 GPUs x (9 + 3 x 6 + 8 x 5 s) = 8 x 67 s
    assert float(ok["gpu_hours"]) == pytest.approx(8 * 67 / 3600)
    bad = runs["dispatcher=deepep mbs=2"]
    assert bad["status"] == "failed"
    assert bad["failure"] == "dispatcher downgrade on rank 0: requested deepep, built alltoall backend none"
    html = (root / "mbridge_ab.html").read_text()
    assert "<b>model</b>: kimi_k2_proxy" in html and "<b>dtype</b>: bf16" in html
    for header in ("status", "failure: class, rank, first error line", "time per iteration (ms)",
                   "MFU (% of dense BF16 peak)", "tokens/s per GPU", "GPU-hours (iterations)",
                   "baseline time per iteration (ms)", "change 95 % interval (%)", "interval method"):
        assert f"<th>{header}</th>" in html
    assert "<script" not in html and not re.search(r"(?:src|href)=['\"]?(?:https?:)?//", html)


def test_reports_and_jobs_are_readable_by_the_team(ab_results: tuple[Path, Path]) -> None:
    """Issue 14: reports and generated jobs get the modes open() / mkdir() give under the umask (0644 / 0755 here),
    not mkstemp's 0600 / mkdtemp's 0700: a team sharing the results folder can read them."""
    import os
    import stat

    root, run = ab_results
    mask = os.umask(0)
    os.umask(mask)
    for path in [*root.glob("mbridge_*.csv"), *root.glob("mbridge_*.html"), run / "cloudai_sbatch_script.sh",
                 run / "mbridge_config.json"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path
    assert stat.S_IMODE((run / "mbridge_payload").stat().st_mode) == 0o777 & ~mask
    assert len(list(root.glob("mbridge_*.csv"))) >= 2
