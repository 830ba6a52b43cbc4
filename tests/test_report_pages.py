"""What a reader of the plugin's pages sees that is not a number in a table: the preflight page (verdict colours,
headroom bars drawn to scale, rule and fix in place of memory, GPU-hours only for points that would run, tests named
once), the brand line and the provenance block (versions recorded by the runs, command line without secrets, links
to logs that exist)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from cloudai_mbridge.cli.preflight import write_html
from cloudai_mbridge.plan.memory import GIB, MemoryEstimate
from cloudai_mbridge.reports.provenance import RunSource, collect, command_line, recorded_versions
from cloudai_mbridge.rules import Violation
from cloudai_mbridge.rules.sweep import COLUMNS, PointResult, PreflightReport

FIXTURES = Path(__file__).parent / "fixtures" / "logs" / "gpu"


def estimate(static_gib: float, activations_gib: float, capacity_gib: float) -> MemoryEstimate:
    return MemoryEstimate(weights=int(static_gib * GIB), gradients=0, optimizer=0,
                          activations=int(activations_gib * GIB), dispatcher=0, runtime=0,
                          capacity=int(capacity_gib * GIB), pp_rank=0, in_flight=1)


def preflight_page(tmp_path: Path, argv: list[str] | None = None) -> tuple[str, list[PointResult]]:
    fits = estimate(40, 20, 80)  # 60 GiB, band 0.02 x 40 + 0.05 x 20 = 1.8 GiB
    tight = estimate(60, 19, 80)  # 79 GiB +/- 2.15: within the band of 80
    over = estimate(80, 20, 80)  # 100 GiB +/- 2.6: does not fit, memory_check lets it run
    rejected = Violation("experts-per-ep", {"ep": 7}, "384 experts cannot be split evenly over ep=7",
                         "use an ep that divides the number of experts")
    points = [
        PointResult("sweep", 1, {"mbs": 1}, [], 256, fits, SimpleNamespace(total=55 * GIB), limit_hours=512.0),
        PointResult("sweep", 2, {"mbs": 2}, [], 256, tight, SimpleNamespace(total=70 * GIB), limit_hours=512.0),
        PointResult("sweep", 3, {"mbs": 4}, [], 256, over, None, limit_hours=512.0),
        PointResult("sweep", 4, {"mbs": 8}, [rejected], 256, None, None, limit_hours=512.0),
        PointResult("single", 0, {}, [], 8, fits, None, limit_hours=16.0),
    ]
    path = write_html(PreflightReport("scen", "sys", points), tmp_path / "preflight.html", argv=argv)
    return path.read_text(), points


def _rows(page: str) -> list[str]:
    return re.findall(r"<tr class='(?:|bad|warn)'>(.*?)</tr>", page)


def _pct(style: str, key: str) -> float:
    return float(re.search(rf"{key}:([\d.]+)%", style).group(1))


def test_preflight_page_speaks_in_words_and_names_each_test_once(tmp_path: Path) -> None:
    page, _ = preflight_page(tmp_path)
    for machine in COLUMNS:  # the CSV's names stay in the CSV
        if "_" in machine:
            assert machine not in page, machine
    for header in ("values that vary", "verdict", "GPUs", "memory per GPU against the GPU's capacity (GiB)",
                   "estimate ± band (GiB)", "Megatron-Bridge's estimate (GiB)", "largest term (GiB)", "GPU-hours"):
        assert header in page, header
    assert page.count("test sweep") == 1 and "4 points, 3 would run" in page
    assert page.count("test single") == 1  # no sweep: its one row names it, no group row
    assert "3 of 5 points would run" not in page and "4 of 5 points would run" in page
    assert "<b>experts-per-ep</b> (1 point)" in page


def test_preflight_rows_colour_the_verdict_and_show_hours_only_when_the_point_runs(tmp_path: Path) -> None:
    page, _ = preflight_page(tmp_path)
    fits, tight, over, rejected, single = _rows(page)
    assert "v-ok'>would run<" in fits and "v-ok'>would run<" in single
    assert "v-warn'>would run: memory tight<" in tight
    assert "v-warn'>would run under memory_check: does not fit<" in over
    assert "v-bad'>rejected<" in rejected
    for row in (fits, tight, over):
        assert "512.0<br><span class='sub'>at the time limit" in row
    assert "512" not in rejected and "class='hb'" not in rejected  # no GPU-hours, no memory bar
    assert "<b>experts-per-ep</b>: 384 experts cannot be split evenly over ep=7" in rejected
    assert "<b>Fix</b>: use an ep that divides the number of experts" in rejected
    assert "60.0 ± 1.8 of 80<br><span class='sub'>fits, 20.0 GiB free" in fits
    assert "does not fit, 20.0 GiB over" in over


def test_headroom_bars_are_drawn_to_one_scale_with_band_capacity_and_bridge(tmp_path: Path) -> None:
    page, _ = preflight_page(tmp_path)
    scale = (100 + 2.6) * 1.04  # the largest estimate + band, 4 % margin
    bars = re.findall(r"<div class='hb' title='([^']*)'>(.*?)</div></div>", page)
    assert len(bars) == 4
    title, inner = bars[0]
    assert html.unescape(title) == "estimate 60.0 ± 1.8 GiB of 80 GiB; Megatron-Bridge's estimate 55.0 GiB"
    est = re.search(r"class='est (\w+)' style='([^']*)'", inner)
    band = re.search(r"class='band' style='([^']*)'", inner).group(1)
    cap = re.search(r"class='cap' style='([^']*)'", inner).group(1)
    bridge = re.search(r"class='br' style='([^']*)'", inner).group(1)
    assert est.group(1) == "fits" and _pct(est.group(2), "width") == pytest.approx(60 / scale * 100, abs=0.01)
    assert _pct(band, "left") == pytest.approx(58.2 / scale * 100, abs=0.01)
    assert _pct(band, "width") == pytest.approx(3.6 / scale * 100, abs=0.01)
    assert _pct(cap, "left") == pytest.approx(80 / scale * 100, abs=0.01)
    assert _pct(bridge, "left") == pytest.approx(55 / scale * 100, abs=0.01)
    assert re.search(r"class='est (\w+)'", bars[1][1]).group(1) == "tight"
    assert re.search(r"class='est (\w+)'", bars[2][1]).group(1) == "nofit"
    assert "class='br'" not in bars[2][1]  # no Bridge estimate for that point: no marker
    # the axis above the bars: round GiB ticks on the same scale
    ticks = re.findall(r"<span style='left:([\d.]+)%'>([\d,]+)</span>", page)
    assert [t for _, t in ticks] == ["0", "25", "50", "75", "100"]
    assert float(ticks[4][0]) == pytest.approx(100 / scale * 100, abs=0.05)


def test_every_page_has_the_brand_and_provenance_without_secrets(tmp_path: Path) -> None:
    argv = ["/usr/bin/cloudai-mbridge", "preflight", "--system-config", "s.toml",
            "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789"]
    page, _ = preflight_page(tmp_path, argv=argv)
    assert "<header class='brand'><b>cloudai-mbridge</b>" in page and "not by CloudAI" in page
    assert "<title>cloudai-mbridge: Preflight: scen on sys</title>" in page
    assert "id='provenance'" in page and "<th>system</th><td>sys</td>" in page
    assert "cloudai-mbridge preflight --system-config s.toml HF_TOKEN=&lt;redacted by cloudai-mbridge&gt;" in page
    assert "hf_abcdefghij" not in page
    assert "<script" not in page and not re.search(r"(?:src|href)=['\"]?(?:https?:)?//", page)


def test_command_line_names_a_module_entry_point_as_typed() -> None:
    import cloudai_mbridge.reports.provenance as prov

    demo = Path(prov.__file__).parent / "demo.py"
    assert command_line([str(demo), "--output-dir", "x"]) == "python3 -m cloudai_mbridge.reports.demo --output-dir x"
    main = Path(prov.__file__).parents[1] / "__main__.py"
    assert command_line([str(main), "generate-report"]) == "python3 -m cloudai_mbridge generate-report"
    assert command_line(["benchmarks/report_screenshots.py"]) == "python3 benchmarks/report_screenshots.py"
    assert command_line(["/venv/bin/cloudai-mbridge", "run"]) == "cloudai-mbridge run"


def test_recorded_versions_come_from_the_runs_logs_and_damage_is_not_shown(tmp_path: Path) -> None:
    # a real GPU refit: its REFIT_CONFIG line carries the versions
    assert recorded_versions(FIXTURES / "refit_tp2-ep2_1l") == {"megatron_core": "0.17.1", "python": "3.12.3",
                                                                "torch": "2.11.0+cu130"}
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "rank-0.log").write_text(
        "0: MBRIDGE_VERSIONS {\"megatron_bridge\": \"0.4.2\", \"megatron_core\": \"0.16.0<script>\", "
        "\"torch\": \"2.9.0\", \"host\": \"node-17\", \"date_utc\": \"2026-11-20T10:00:00+00:00\"}\n")
    assert recorded_versions(run) == {"megatron_bridge": "0.4.2", "torch": "2.9.0", "host": "node-17",
                                      "date_utc": "2026-11-20T10:00:00+00:00"}
    (run / "logs" / "rank-3.log").write_text("x\n")
    prov = collect(tmp_path, [RunSource("a", run, engine="bridge", failed_rank=3),
                              RunSource("b", FIXTURES / "ab_mbs1_overlap-off_alltoall", engine="mcore",
                                        started="2026-11-22 15:47:38.16", ended="2026-11-22 15:47:49.36")],
                   system="sys")
    block = prov.block_html()
    assert "Megatron-Bridge 0.4.2 (1 of 2 runs), not used (engine mcore) (1 of 2 runs)" in block
    assert "node-17" in block and "2026-11-20 10:00:00 to 2026-11-22 15:47:49" in block
    assert "&lt;script" not in block and "<script" not in block
    links = re.findall(r"href='([^']*)'", block)
    assert "run/logs/rank-3.log" in links and "run/logs/rank-0.log" in links
    for href in links:  # every link resolves to something that exists, relative to the page's folder
        assert (tmp_path / href).exists(), href
