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

    from cloudai_mbridge.plots import series_figure
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


def _overlaps(boxes) -> list[tuple[int, int]]:
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]


def test_time_rows_name_each_arm_with_interval_whiskers_and_say_why_one_is_missing() -> None:
    import matplotlib.pyplot as plt

    from cloudai_mbridge.plots import RangeRow, range_figure

    fig = range_figure("time by dispatcher", "time per iteration (s)", [
        RangeRow("mbs=1\ndispatcher=alltoall (baseline)", 5.0, (4.9, 5.2), [4.95, 5.05], group="mbs=1"),
        RangeRow("mbs=1\ndispatcher=deepep", 4.0, (3.8, 4.1), [3.9, 4.1], best=True, group="mbs=1"),
        RangeRow("mbs=2\ndispatcher=deepep", None, note="not compared: dispatcher downgraded (deepep -> alltoall)",
                 group="mbs=2"),
    ], best_label="winner", spread_label="95 % interval of the mean")
    try:
        ax = fig.axes[0]
        assert ax.get_xlabel() == "time per iteration (s)" and ax.get_title() == "time by dispatcher"
        ticks = sorted(ax.get_yticklabels(), key=lambda t: -t.get_position()[1])  # top to bottom
        assert [t.get_text() for t in ticks] == ["mbs=1\ndispatcher=alltoall (baseline)", "mbs=1\ndispatcher=deepep",
                                                 "mbs=2\ndispatcher=deepep"]
        whiskers = [c for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer"]
        assert [tuple(c.lines[2][0].get_segments()[0][:, 0]) for c in whiskers] == [(4.9, 5.2), (3.8, 4.1)]
        bars = [c for c in ax.containers if c.__class__.__name__ == "BarContainer"]
        assert [round(b.patches[0].get_width(), 6) for b in bars] == [5.0, 4.0]  # no bar for the invalid arm
        assert any("dispatcher downgraded" in t.get_text() for t in ax.texts)
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "winner" in legend and "95 % interval of the mean" in legend
    finally:
        plt.close(fig)


def test_many_long_mapping_labels_do_not_overlap() -> None:
    """The old refit plot rotated long x labels into each other; rows on the y axis cannot collide."""
    import matplotlib.pyplot as plt

    from cloudai_mbridge.plots import RangeRow, range_figure

    rows = [RangeRow(f"TP{2 ** (i % 4)}·PP2·EP{2 ** (i % 5)} → TP{2 ** (i % 3)}·PP1·EP{2 ** (i % 6)}\n"
                     "non-collocated, nvshmem (64 MiB messages)", 40.0 + i, (39.0 + i, 42.0 + i), group=str(i // 3))
            for i in range(14)]
    fig = range_figure("refit", "refit time (ms)", rows)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        boxes = [t.get_window_extent(renderer) for t in fig.axes[0].get_yticklabels()]
        assert len(boxes) == 14 and _overlaps(boxes) == []
        width = fig.get_size_inches()[0] * fig.dpi
        assert all(b.x0 >= 0 and b.x1 <= width for b in boxes)  # none cut at the figure's edge
    finally:
        plt.close(fig)


# --- the refit scenario page -----------------------------------------------------------------------------------------
def test_refit_page_names_full_layouts_the_fastest_mapping_spread_and_failure(tmp_path: Path) -> None:
    import csv

    page_path = build_refit_page(tmp_path)
    page = page_path.read_text()
    for header in ("median time (ms)", "spread p10-p90 (ms)", "min-max (ms)", "timed refits (n)",
                   "median vs the lowest median from its source: change (%), 95 % interval, verdict",
                   "bandwidth (GB/s)", "status",
                   "failure: class, rank, first error line"):
        assert f"<th>{header}</th>" in page
    # Both layouts in full: EP dropping to 1 stays visible (it read "TP2xEP2 -> TP4" before).
    assert "TP2·EP2 → TP4·EP1·ETP1" in page and "TP2·EP2 → TP1·EP1" in page and "TP2·EP2 → TP1·EP4" in page
    assert "xEP" not in page
    # The fastest mapping from the source layout, with its spread (p10-p90 of 44.87, 45.21, 45.61) and n.
    # One verified mapping: nothing to rank it against, so it is not called the fastest.
    assert ("From <b>TP2·EP2</b> (tiny_moe, 2 layers): one verified mapping <b>→ TP1·EP4</b>, 45.2 ms median "
            "(p10-p90 44.9-45.5 ms, n = 3)") in page
    assert "only verified mapping: no ranking" in page and "fastest" not in page.split("<h2>Mappings</h2>")[0]
    assert " without a time: → TP1·EP1: refit error on rank 0: REFIT_ERROR phase=plan" in page
    assert "<b>model</b>: tiny_moe" in page and "<b>dtype</b>: fp32" in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")
    # The CSV numbers the sweep's points as CloudAI does (it read 1, 0, 0 for points 1, 2 and 4).
    with (page_path.parent / "mbridge_refit.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["mapping"]) for r in rows] == [("1", "TP2·EP2 → TP1·EP4"), ("2", "TP2·EP2 → TP1·EP1"),
                                                          ("3", "TP2·EP2 → TP4·EP4·ETP1"),
                                                          ("4", "TP2·EP2 → TP4·EP1·ETP1")]
    assert rows[0]["ranks"] == "4" and rows[0]["fastest"] == "True" and rows[1]["fastest"] == "False"
    assert float(rows[0]["time_ms_p10"]) == pytest.approx(44.938) and float(rows[0]["time_ms_p90"]) == 45.53


def _refit_row(src: str, dst: str, times: list[float] | None, status: str = "ok") -> dict:
    from cloudai_mbridge.metrics.stats import steady_state

    t = steady_state(times or [], warmup=0)
    return {"test": "t", "step": 1, "model": "kimi", "layers": 2, "src_layout": src, "dst_layout": dst,
            "mapping": f"{src} → {dst}", "mode": "collocated", "transport": "nccl", "ranks": 8,
            "time_ms_min": t.min, "time_ms_p10": t.p10, "time_ms_median": t.median, "time_ms_p90": t.p90,
            "time_ms_max": t.max, "n": t.n, "times_ms": times or [], "bandwidth_gbps": None, "bytes_moved": None,
            "verification": "pass" if times else "missing", "mismatched": 0, "status": status,
            "failure": None if times else "NCCL timeout on rank 3: watchdog", "precision": "bf16", "run": "r"}


def test_fastest_mapping_is_called_only_when_every_interval_on_the_difference_excludes_0(tmp_path: Path) -> None:
    from cloudai_mbridge.reports.provenance import collect
    from cloudai_mbridge.reports.refit_table import rank_mappings, write_refit_report

    rows = [
        # from TP8·EP8: TP8·EP4 is 20 % faster and the p10-p90 ranges (8 refits each) do not touch
        _refit_row("TP8·EP8", "TP8·EP4", [10.0, 10.1, 10.2, 10.3, 10.4, 10.5, 10.6, 10.7]),
        _refit_row("TP8·EP8", "TP16·EP4", [12.0, 12.2, 12.4, 12.6, 12.8, 13.0, 13.2, 13.4]),
        _refit_row("TP8·EP8", "TP4·EP16", None, status="failed"),
        # from TP16·EP4: medians 45.9 and 64.9 ms, but the interval of the difference holds 0: no ranking
        _refit_row("TP16·EP4", "TP8·EP4", [44.0, 45.9, 70.0, 46.0, 45.0]),
        _refit_row("TP16·EP4", "TP32·EP2", [40.0, 64.9, 66.0, 65.0, 64.0]),
        # from TP4·EP8: every refit of one beats every refit of the other, 3 each: ranked
        _refit_row("TP4·EP8", "TP8·EP4", [20.0, 20.1, 20.2]),
        _refit_row("TP4·EP8", "TP4·EP4", [30.0, 30.1, 30.2]),
        # from TP2·EP4: 2 refits each is too few to rank, however far apart
        _refit_row("TP2·EP4", "TP2·EP2", [20.0, 20.1]),
        _refit_row("TP2·EP4", "TP4·EP1", [30.0, 30.1]),
    ]
    findings = {f["source"]: f for f in rank_mappings(rows)}
    assert findings["TP8·EP8"]["certainty"] == "clear" and findings["TP8·EP8"]["best"]["dst_layout"] == "TP8·EP4"
    assert [r["dst_layout"] for r in findings["TP8·EP8"]["failed"]] == ["TP4·EP16"]
    assert rows[1]["vs_fastest_pct"] == pytest.approx((12.7 - 10.35) / 10.35 * 100)
    assert findings["TP16·EP4"]["certainty"] == "not distinguishable"
    assert findings["TP16·EP4"]["best"]["dst_layout"] == "TP8·EP4"  # the lower median, still named
    assert findings["TP4·EP8"]["certainty"] == "clear"
    assert findings["TP2·EP4"]["certainty"] == "not distinguishable"
    write_refit_report(tmp_path, "Refit: t", rows, collect(tmp_path, []))
    page = (tmp_path / "mbridge_refit.html").read_text()
    assert "ranked: every other mapping is slower" in page
    assert "lowest median <b>→ TP8·EP4</b>" in page and "no fastest: not distinguishable from → TP32·EP2" in page
    assert "not distinguishable: n &lt; 3 timed refits" in page
    # the clear pair: the change, its interval and n on the line (12.7 / 10.35 - 1 = +22.7 %)
    assert re.search(r"→ TP16·EP4: 12\.7 ms median, \+22\.7 % \(95 % interval \+\d+\.\d\.\.\+\d+\.\d %, n = 8 \+ 8 "
                     r"timed refits\)", page)
    assert re.search(r"<td class='text'>\+23 % \[\+\d+\.\.\+\d+\], slower</td>", page)  # its row
    assert "→ TP4·EP16: NCCL timeout on rank 3: watchdog" in page


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
    from hostile.test_damaged_refit import payload_logs

    payload_logs(good, [45.61, 44.87, 45.21])  # what the payload prints for this run (its run id and digest)
    (bad / "logs").mkdir(exist_ok=True)
    (bad / "logs" / "rank-0.log").write_text('REFIT_ERROR phase=plan rank=0 message="no route for expert 3"\n')
    for rank in (1, 2, 3):
        (bad / "logs" / f"rank-{rank}.log").write_text("ok\n")
    root = next(res.output_dir.iterdir())
    proc = run_cli("generate-report", "--system-config", str(CONF / "system" / "local_slurm.toml"),
                   "--test-scenario", str(scenario_path), "--result-dir", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "mbridge_refit.html"


def test_refit_rows_of_a_copy_service_sweep_are_told_apart() -> None:
    # A sweep of coalesce_mib x executor x coalesce_schedule (conf/test/kimi_k2_refit.toml's fields) gives rows with
    # the same mapping and transport: the label is all that tells a reader which ran.
    from cloudai_mbridge.reports.refit_table import transport_label

    labels = {transport_label({"transport": "nccl", "coalesce_mib": mib, "executor": ex, "coalesce_schedule": sch})
              for mib, ex, sch in [(0, "megatron", "rounds"), (1024, "megatron", "rounds"),
                                   (1024, "replay", "rounds"), (1024, "replay", "pairwise")]}
    assert labels == {"nccl", "nccl (1024 MiB messages)", "nccl (1024 MiB messages, replay)",
                      "nccl (1024 MiB messages, replay, pairwise)"}
    assert transport_label({"transport": "gloo"}) == "gloo"
