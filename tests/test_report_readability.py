"""What a reader of the reports sees: failure reasons, MFU and cost, engine, headers with units, titled plots
without the warm-up, the refit page; checked on real logs and on matplotlib's own objects (no image diffing)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from helpers import CONF, dry_run, run_cli, sbatch_scripts, write_case

from cloudai_mbridge.metrics import parse_training_run

LOGS = Path(__file__).parent / "fixtures" / "logs"
BRIDGE = LOGS / "bridge" / "te_dsv3_bf16"
LINE = re.compile(r"iteration\s+(\d+)/.*?\(ms\): ([\d.]+) \|.*?TFLOP/s/GPU\): ([\d.]+) \|")


def text_series() -> list[tuple[int, float, float]]:
    rows = []
    for line in (BRIDGE / "logs" / "rank-0.log").read_text().splitlines():
        if m := LINE.search(line):
            rows.append((int(m.group(1)), float(m.group(2)), float(m.group(3))))
    return rows


def make_run(root: Path, config: dict, ranks: dict[int, str]) -> Path:
    (root / "logs").mkdir(parents=True)
    (root / "mbridge_config.json").write_text(json.dumps(config))
    for rank, text in ranks.items():
        (root / "logs" / f"rank-{rank}.log").write_text(text)
    return root


# --- MFU, tokens, GPU-hours, engine -------------------------------------------------------------------------------
def test_mfu_tokens_gpu_hours_and_engine_on_a_real_bridge_run() -> None:
    m = parse_training_run(BRIDGE)
    rows = text_series()
    steady = rows[4:]  # the default warm-up: iterations 1-4
    tflops = math.fsum(r[2] for r in steady) / len(steady)
    assert m.config["gpu"] == "h200"  # the H100 run's config says h200: both have a 989.5 TFLOP/s dense BF16 peak
    assert m.gpu_peak_tflops == 989.5
    assert m.mfu_pct == pytest.approx(tflops / 989.5 * 100)
    assert 6.0 < m.mfu_pct < 7.5
    tokens = math.fsum(4 * 4096 / (r[1] / 1000) for r in steady) / len(steady)  # gbs 4 x seq 4096, 1 GPU
    assert m.tokens_per_s_per_gpu == pytest.approx(tokens)
    assert m.gpu_hours == pytest.approx(math.fsum(r[1] for r in rows) / 3.6e6)  # 1 GPU, log_interval 1
    assert (m.engine_requested, m.engine_selected, m.engine) == ("bridge", "bridge", "bridge")
    s = m.summary()
    assert s["engine"] == "bridge" and s["mfu_pct"] == m.mfu_pct and s["gpu_hours"] == m.gpu_hours


def test_engine_unknown_for_auto_without_the_payload_line(tmp_path: Path) -> None:
    text = (BRIDGE / "logs" / "rank-0.log").read_text().replace("MBRIDGE_ENGINE", "XX")
    config = {**json.loads((BRIDGE / "mbridge_config.json").read_text()), "engine": "auto"}
    m = parse_training_run(make_run(tmp_path / "r", config, {0: text}))
    assert m.engine is None and m.summary()["engine_requested"] == "auto"


# --- failure reasons ------------------------------------------------------------------------------------------------
CONFIG = {"workload": "training", "world_size": 2, "num_nodes": 1, "gpus_per_node": 2, "gbs": 8,
          "seq_length": 4096, "dispatcher": "alltoall", "gpu": "h100"}


@pytest.mark.parametrize(
    ("fixture", "rank", "klass", "first_line"),
    [
        ("ms_swift_5943_torch_oom.log", 15, "out of memory", "torch.OutOfMemoryError: CUDA out of memory."),
        ("nccl_1409_watchdog.log", 7, "NCCL timeout", None),
        ("megatron_bridge_known_issue_deepep_timeout.log", None, "DeepEP timeout", "RuntimeError: DeepEP error"),
    ],
)
def test_failure_class_and_first_error_line_in_the_summary(tmp_path, fixture, rank, klass, first_line) -> None:
    text = (LOGS / fixture).read_text()
    # the failing rank's own log among healthy ones
    where = rank if rank is not None else 0
    ranks = {r: "rank up\n" for r in range(where + 1)} | {where: text}
    m = parse_training_run(make_run(tmp_path / "r", {**CONFIG, "world_size": where + 1}, ranks))
    s = m.summary()
    assert s["failure_class"] == klass
    # the line as logged (rank label stripped; details stop at 300 characters)
    assert s["failure_line"] and any(ln.strip().startswith(s["failure_line"]) for ln in _clean_lines(text))
    if first_line:
        assert first_line in s["failure_line"]
    if rank is not None:
        assert s["failure_rank"] == rank


def _clean_lines(text: str) -> list[str]:
    from cloudai_mbridge.metrics.scan import clean_text

    return [clean_text(line.encode())[0] for line in text.splitlines()]


def test_import_error_and_config_error_classes(tmp_path: Path) -> None:
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
            "ModuleNotFoundError: No module named 'transformer_engine'\n")
    m = parse_training_run(make_run(tmp_path / "a", {**CONFIG, "world_size": 1}, {0: text}))
    assert m.summary()["failure_class"] == "import error"
    assert m.summary()["failure_line"] == "ModuleNotFoundError: No module named 'transformer_engine'"
    text = "MBRIDGE_CONFIG_ERROR field=ep message=\"num_experts 16 is not divisible by ep 3\"\n"
    m = parse_training_run(make_run(tmp_path / "b", {**CONFIG, "world_size": 1}, {0: text}))
    assert m.summary()["failure_class"] == "config error"


def test_was_run_successful_names_the_class_rank_and_line(tmp_path: Path) -> None:
    from cloudai_mbridge.workloads.reporting import run_status

    oom = (LOGS / "ms_swift_5943_torch_oom.log").read_text()
    run = make_run(tmp_path / "r", {**CONFIG, "world_size": 4}, {0: "up\n", 1: "up\n", 2: oom, 3: "up\n"})
    status = run_status(run)
    assert not status.is_successful
    assert status.error_message.startswith("out of memory on rank 2: torch.OutOfMemoryError: CUDA out of memory.")


# --- plots: matplotlib objects -------------------------------------------------------------------------------------
def _axes_text(fig) -> list[tuple[str, str, str]]:
    return [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]


def test_per_run_figure_has_titles_units_and_no_warmup() -> None:
    import matplotlib.pyplot as plt

    from cloudai_mbridge.reports.plots import series_figure
    from cloudai_mbridge.workloads.reporting import training_figure_panels, training_title

    m = parse_training_run(BRIDGE)
    fig = series_figure(training_title("dsv3_bf16", m), training_figure_panels(m), "iteration")
    try:
        title = fig._suptitle.get_text()
        assert "deepseek_v3_proxy bf16" in title and "alltoall" in title and "engine bridge" in title
        assert ": ok" not in title.splitlines()[0]
        (t0, _, y0), (_, _, y1), (_, x2, y2) = _axes_text(fig)
        assert y0 == "iteration time (ms)" and y1 == "throughput (TFLOP/s per GPU)" and y2 == "lm loss (nats)"
        assert x2 == "iteration"
        assert "warm-up iterations 1-4 not shown (575.7-11,827.7 ms)" in t0
        times = fig.axes[0].lines[0].get_ydata()
        assert len(times) == 36 and max(times) < 1400  # the 11,827.7 ms first step is not on the axis
        assert min(fig.axes[0].lines[0].get_xdata()) == 5
    finally:
        plt.close(fig)


def test_ab_bars_are_named_by_arm_with_interval_error_bars() -> None:
    import matplotlib.pyplot as plt

    from cloudai_mbridge.reports.plots import bar_figure

    fig = bar_figure("time by dispatcher", "time per iteration (s)", ["mbs=1", "mbs=2"],
                     {"alltoall": [5.0, 3.0], "deepep": [4.0, None]},
                     {"alltoall": [(4.9, 5.2), (2.9, 3.1)], "deepep": [(3.8, 4.1), None]})
    try:
        ax = fig.axes[0]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["alltoall", "deepep"]
        assert ax.get_ylabel() == "time per iteration (s)" and ax.get_title() == "time by dispatcher"
        caps = [c for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer"]
        assert len(caps) == 2
        segments = caps[0].lines[2][0].get_segments()
        assert [tuple(s[:, 1]) for s in segments] == [(4.9, 5.2), (2.9, 3.1)]
    finally:
        plt.close(fig)


# --- the refit scenario page -----------------------------------------------------------------------------------------
def test_refit_page_headers_units_min_max_and_failure(tmp_path: Path) -> None:
    page = build_refit_page(tmp_path).read_text()
    for header in ("min time (ms)", "median time (ms)", "max time (ms)", "bandwidth (GB/s)", "status",
                   "failure: class, rank, first error line"):
        assert f"<th>{header}</th>" in page
    assert "<b>model</b>: tiny_moe" in page and "<b>dtype</b>: fp32" in page
    assert "refit error on rank 0: REFIT_ERROR phase=plan" in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")


def build_refit_page(tmp_path: Path) -> Path:
    """A dry-run of the CPU refit sweep, one verified point and one failed, then generate-report."""
    test_toml = (CONF / "test" / "refit_cpu_smoke.toml").read_text()
    scenario = (CONF / "test_scenario" / "refit_cpu_smoke.toml").read_text()
    _, scenario_path = write_case(tmp_path, test_toml.replace('name = "refit_cpu_smoke"', 'name = "case"'),
                                  scenario.replace("refit_cpu_smoke", "case"))
    res = dry_run(CONF / "system" / "local_slurm.toml", scenario_path, tmp_path)
    assert res.returncode == 0, res.output
    runs = [s.parent for s in sbatch_scripts(res.output_dir)]
    assert len(runs) >= 2  # the sweep's points; the first two get logs, any other stays without
    good, bad = runs[:2]
    iters = "".join(f"REFIT_ITER iter={i} time_ms={ms}\n" for i, ms in enumerate([45.61, 44.87, 45.21]))
    (good / "logs").mkdir(exist_ok=True)
    (good / "logs" / "rank-0.log").write_text(
        iters + "REFIT_STATS bytes_remote=1000000000 bytes_local=0 send_ops=4 recv_ops=4\n"
        "REFIT_VERIFY status=pass params=12 mismatched=0 detail=bit-exact\n"
        'REFIT_RESULT {"refit_time_ms": 45.21, "bandwidth_gbps": 22.1}\n')
    (bad / "logs").mkdir(exist_ok=True)
    (bad / "logs" / "rank-0.log").write_text('REFIT_ERROR phase=plan rank=0 message="no route for expert 3"\n')
    for run in (good, bad):
        for rank in (1, 2, 3):
            (run / "logs" / f"rank-{rank}.log").write_text("ok\n")
    root = next(res.output_dir.iterdir())
    proc = run_cli("generate-report", "--system-config", str(CONF / "system" / "local_slurm.toml"),
                   "--test-scenario", str(scenario_path), "--result-dir", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "mbridge_refit.html"
