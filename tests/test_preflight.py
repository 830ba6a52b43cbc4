"""cloudai-mbridge preflight through the real CLI: exit codes, the table, files only under --output-dir."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from helpers import CONF, run_cli, write_case

from cloudai_mbridge.rules.sweep import time_limit_hours

B300 = CONF / "system" / "slurm_b300_efa.toml"
KIMI = (
    'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
    'model = "kimi_k2"\ngpu = "b300"\ntp = 8\npp = 8\nvp = 2\ngbs = 256\ntrain_iters = 24\n'
)
SCENARIO = 'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 32\ntime_limit = "02:00:00"\n'


def preflight(tmp: Path, scenario: Path, *extra: str, system: Path = B300, output: bool = True):
    cwd = tmp / "cwd"
    cwd.mkdir(exist_ok=True)
    out = ["--output-dir", str(tmp / "out")] if output else []
    proc = run_cli("preflight", "--system-config", str(system), "--test-scenario", str(scenario), *out, *extra,
                   cwd=cwd)
    return proc, cwd


def test_ab_scenario_all_points_accepted_with_memory_and_hours(tmp_path: Path) -> None:
    proc, cwd = preflight(tmp_path, CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("kimi_k2_dispatcher_ab ")]
    assert len(lines) == 8
    assert all(" ok " in ln and " 256 " in ln for ln in lines)
    assert "mbs=4 dispatcher=deepep moe_a2a_overlap=true" in proc.stdout
    # 8 points x 256 GPUs x 2 h time limit
    assert "8 of 8 point(s) accepted" in proc.stdout and "4096.0 GPU-hours" in proc.stdout
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "preflight.csv").read_text())))
    assert [r["point"] for r in rows] == [str(i) for i in range(1, 9)]
    assert all(r["verdict"] == "ok" and r["memory_gib_per_gpu"].endswith("/268") for r in rows)
    assert rows[4]["largest_term_gib"].startswith("activations")
    html = (tmp_path / "out" / "preflight.html").read_text()
    assert "<h1>Preflight: kimi_k2_dispatcher_ab on slurm-b300-efa</h1>" in html
    assert html.count("test kimi_k2_dispatcher_ab") == 1 and "8 points, 8 would run" in html
    assert html.count("class='hb'") == 8 and html.count("v-ok'>would run<") == 8
    assert "memory_gib_per_gpu" not in html and "reason_and_fix" not in html and "/268" not in html
    # point 1: estimate (the CSV's number), band and capacity in GiB
    est = rows[0]["memory_gib_per_gpu"].split("/")[0]
    assert re.search(re.escape(est) + r" ± \d+\.\d of 268<", html), est
    # nothing written outside --output-dir: no debug.log, no results folder, no job
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["preflight.csv", "preflight.html"]


def test_without_output_dir_nothing_is_written(tmp_path: Path) -> None:
    proc, cwd = preflight(tmp_path, CONF / "test_scenario" / "refit_cpu_expected_rejection.toml",
                          system=CONF / "system" / "local_slurm.toml", output=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 of 2 point(s) accepted, 1 rejected (1 as the test declares in expected_rejections)" in proc.stdout
    assert "rejected (expected)" in proc.stdout and "[refit-layout]" in proc.stdout
    assert list(cwd.iterdir()) == [] and not (tmp_path / "out").exists()


def test_rejected_point_shows_rule_and_fix(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path / "conf", KIMI + "ep = [32, 7]\n", SCENARIO)
    proc, _ = preflight(tmp_path, scenario)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 of 2 point(s) accepted, 1 rejected" in proc.stdout
    assert "[experts-per-ep] 384 experts cannot be split evenly over ep=7" in proc.stdout
    assert "Fix: use an ep that divides the number of experts" in proc.stdout
    rows = {r["varies"]: r for r in csv.DictReader(io.StringIO((tmp_path / "out" / "preflight.csv").read_text()))}
    assert rows["ep=7"]["verdict"] == "rejected" and "experts-per-ep" in rows["ep=7"]["rule"]
    assert rows["ep=32"]["verdict"] == "ok" and rows["ep=32"]["rule"] == ""
    assert "512.0 GPU-hours" in proc.stdout  # the accepted point only
    assert (rows["ep=7"]["gpu_hours"], rows["ep=32"]["gpu_hours"]) == ("", "512.0")  # a rejected point costs nothing
    html = (tmp_path / "out" / "preflight.html").read_text()
    assert "<b>experts-per-ep</b>: 384 experts cannot be split evenly over ep=7" in html
    assert "<b>Fix</b>: use an ep that divides the number of experts" in html


def test_every_point_rejected_exits_1(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path / "conf", KIMI + "ep = [7, 5]\n", SCENARIO)
    proc, _ = preflight(tmp_path, scenario)
    assert proc.returncode == 1
    assert "0 of 2 point(s) accepted" in proc.stdout and "every point is rejected" in proc.stdout


def test_rejected_point_without_sweep_exits_1(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path / "conf", KIMI + "ep = 7\n", SCENARIO)
    proc, _ = preflight(tmp_path, scenario)
    assert proc.returncode == 1
    assert "[experts-per-ep]" in proc.stdout and "rejected test(s) without a sweep: case" in proc.stdout


@pytest.mark.parametrize(
    ("test_toml", "scenario_toml"),
    [
        (KIMI + "ep = 32\n", SCENARIO.replace('test_name = "case"', 'test_name = "missing"')),
        (KIMI + "ep = 32\nbogus_field = 1\n", SCENARIO),
        (KIMI + "ep = = 32\n", SCENARIO),
    ],
    ids=["missing-test", "unknown-field", "broken-toml"],
)
def test_bad_input_exits_2_without_traceback(tmp_path: Path, test_toml: str, scenario_toml: str) -> None:
    _, scenario = write_case(tmp_path / "conf", test_toml, scenario_toml)
    proc, cwd = preflight(tmp_path, scenario)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    # a file that is not TOML is named with its line before CloudAI reads anything (cli.py toml_problems)
    # an unknown field is named with "did you mean" before CloudAI's parser answers it (cli/field_check.py)
    expected = ("case.toml: not valid TOML (" if "= =" in test_toml
                else "case.toml: 'cmd_args.bogus_field' = 1 is not a field of the MBridgeTraining test"
                if "bogus" in test_toml else "preflight: could not read")
    assert expected in proc.stderr
    assert list(cwd.iterdir()) == [] and not (tmp_path / "out").exists()


def test_measured_step_time_from_a_result_dir(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path / "conf", KIMI + "ep = 32\nmbs = [1, 2]\n", SCENARIO)
    results = tmp_path / "results"
    run = results / "case" / "0" / "1"
    logs = run / "logs"
    logs.mkdir(parents=True)
    (run / "mbridge_config.json").write_text(json.dumps({"workload": "training", "mbs": 1, "tp": 8}))
    line = (" [2024-04-06 02:55:45] iteration {i:8d}/      24 | consumed samples: 256 | elapsed time per iteration "
            "(ms): 5000.0 | lm loss: 2.0E+00 | loss scale: 1.0 | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |\n")
    (logs / "rank-0.log").write_text("".join(line.format(i=i) for i in range(1, 25)))
    # step 2 recorded a different mbs: not this point's run, so it keeps the time-limit bound
    (results / "case" / "0" / "2" / "logs").mkdir(parents=True)
    (results / "case" / "0" / "2" / "mbridge_config.json").write_text(json.dumps({"workload": "training", "mbs": 4}))
    (results / "case" / "0" / "2" / "logs" / "rank-0.log").write_text(line.format(i=1))
    proc, _ = preflight(tmp_path, scenario, "--result-dir", str(results))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "preflight.csv").read_text())))
    # 256 GPUs x 24 iterations x 5 s = 8.53 GPU-hours
    assert rows[0]["gpu_hours"] == "8.5" and rows[0]["gpu_hours_basis"] == "measured 5.00 s/iter"
    assert rows[1]["gpu_hours"] == "512.0" and rows[1]["gpu_hours_basis"] == "time limit"
    assert "1 from measured iteration times" in proc.stdout


@pytest.mark.parametrize(
    ("limit", "hours"),
    [("30", 0.5), ("01:30", 1 / 40), ("02:00:00", 2.0), ("1-00:00:00", 24.0), ("1-12", 36.0), (None, None),
     ("soon", None)],
)
def test_time_limit_formats(limit: str | None, hours: float | None) -> None:
    assert time_limit_hours(limit) == (pytest.approx(hours) if hours is not None else None)


def test_the_fast_path_gives_the_table_of_checking_every_point_in_full(tmp_path: Path) -> None:
    """Issue 26: preflight remembers a point's memory estimate and renders one job per test and set of
    non-numeric values. On a sweep of 2 x 3 x 3 x 2 x 2 points (numbers and strings, accepted and rejected, two
    memory verdicts) the table is the one of checking every point from scratch: its own estimate, its own job."""

    from cloudai.core import Parser
    from cloudai.parser import HOOK_ROOT

    from cloudai_mbridge.cli import preflight as pf
    from cloudai_mbridge.plan import memory
    from cloudai_mbridge.rules import sweep

    test = ('name = "grid"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\nmodel = "kimi_k2"\n'
            'gpu = "b300"\ntrain_iters = 24\ndeepep_impl = "uccl"\ncontainer_image = "nvcr.io/nvidia/nemo:26.04.01"\n'
            'tp = [1, 8]\npp = [4, 8, 16]\nep = [8, 32, 64]\nmbs = [1, 16]\ndispatcher = ["alltoall", "deepep"]\n')
    tests_dir, scenario = write_case(tmp_path, test, 'name = "grid"\n[[Tests]]\nid = "grid"\ntest_name = "grid"\n'
                                     'num_nodes = 32\ntime_limit = "01:00:00"\n')
    system, _, parsed = Parser(B300, HOOK_ROOT).parse(tests_dir, scenario)
    fast = sweep.preflight(system, parsed)
    slow = []
    tr = parsed.test_runs[0]
    for step, action in enumerate(sweep.sweep_points(tr), start=1):
        memory._remembered_estimate.cache_clear()
        point = sweep.unroll(tr, action, step)
        slow.append(sweep.check_point(point, system, dict(action), None, render=True, previews=None))
    slow_report = sweep.PreflightReport(fast.scenario, fast.system, slow)
    assert len(fast.points) == 72 and {p.verdict for p in fast.points} == {"ok", "rejected"}
    assert len({p.memory.verdict for p in fast.points if p.memory is not None}) >= 2
    assert sweep.rows(fast) == sweep.rows(slow_report)
    # Two worker processes, preflight.csv streamed as the points come and only the shown points kept (the preflight
    # command's path on a large sweep): the same file, the same counts and summary.
    lines: list[str] = []
    streamed = sweep.preflight(system, parsed, sink=lines.append, keep_all=False, workers=2)
    assert "".join(lines) == pf.render_csv(slow_report)
    assert pf.summary_lines(streamed) == pf.summary_lines(slow_report)
    assert sweep.blocking_problems(streamed, parsed) == sweep.blocking_problems(slow_report, parsed)


def test_a_large_sweep_lists_part_of_its_points_and_counts_all(tmp_path: Path, monkeypatch) -> None:
    """Past SHOWN_ALL points the terminal table and the page list the first points that would run and a few
    rejected ones, say so, and count every point; the CSV has them all (here with the limits made small)."""
    from cloudai.core import Parser
    from cloudai.parser import HOOK_ROOT

    from cloudai_mbridge.cli import preflight as pf
    from cloudai_mbridge.rules import sweep

    test = ('name = "grid"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\nmodel = "kimi_k2"\n'
            'gpu = "b300"\ntrain_iters = 24\ntp = [1, 8]\npp = [4, 8, 16]\nep = [8, 32, 64]\nmbs = [1, 16]\n')
    tests_dir, scenario = write_case(tmp_path, test, 'name = "grid"\n[[Tests]]\nid = "grid"\ntest_name = "grid"\n'
                                     'num_nodes = 32\ntime_limit = "01:00:00"\n')
    system, _, parsed = Parser(B300, HOOK_ROOT).parse(tests_dir, scenario)
    full = sweep.preflight(system, parsed)
    accepted = [p.point for p in full.points if p.ok]
    rejected = [p.point for p in full.points if not p.ok]
    assert len(accepted) > 3 and len(rejected) > 2
    monkeypatch.setattr(sweep, "SHOWN_ALL", 10)
    monkeypatch.setattr(sweep, "SHOWN_ACCEPTED", 3)
    monkeypatch.setattr(sweep, "SHOWN_REJECTED", 2)
    lines: list[str] = []
    part = sweep.preflight(system, parsed, sink=lines.append, keep_all=False)
    assert [p.point for p in part.shown()] == sorted(accepted[:3] + rejected[:2])
    assert len(lines) == 37, "header and every point in the CSV"
    text = pf.render_text(part)
    assert (f"showing 3 of {len(accepted)} accepted and 2 of {len(rejected)} rejected point(s); every one of the 36 "
            "points is in preflight.csv") in text
    assert f"{len(accepted)} of 36 point(s) accepted" in text
    html = pf.render_html(part, tmp_path)
    assert html.count("class='hb'") == 3, "a memory bar for each listed point that would run"
    assert f"36 points, {len(accepted)} would run (5 listed here, every one in preflight.csv)" in html
    assert pf.summary_lines(part) == pf.summary_lines(full)
    # Two worker processes, a point a chunk: only what the table may still show comes back whole.
    monkeypatch.setattr(sweep, "CHUNK", 1)
    rows: list[str] = []
    forked = sweep.preflight(system, parsed, sink=rows.append, keep_all=False, workers=2)
    assert "".join(rows) == "".join(lines)
    assert pf.render_text(forked) == text


REFIT_TEST = (
    'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeRefit"\n[cmd_args]\nmodel = "kimi_k2"\n'
    'num_layers = 2\ndevice = "cuda"\ndtype = "bf16"\nmode = "collocated"\ntransport = "nccl"\n'
    'container_image = "nvcr.io/nvidia/nemo:26.04.01"\n[cmd_args.src]\ntp = 1\npp = 2\nep = 8\n'
    '[cmd_args.dst]\ntp = 8\nep = 1\n'
)
REFIT_SCENARIO = (
    'name = "case"\n'
    '[[Tests]]\nid = "ep8pp2_to_tp8"\ntest_name = "case"\nnum_nodes = 2\ntime_limit = "01:00:00"\n'
    '[[Tests]]\nid = "ep8pp2_to_tp4"\ntest_name = "case"\nnum_nodes = 2\ntime_limit = "01:00:00"\n'
    '  [Tests.cmd_args]\n  dst = { tp = 4, ep = 1 }\n'
    '[[Tests]]\nid = "ep8pp2_to_tp8_replay"\ntest_name = "case"\nnum_nodes = 2\ntime_limit = "01:00:00"\n'
    '  [Tests.cmd_args]\n  coalesce_mib = 1024\n  executor = "replay"\n'
    '[[Tests]]\nid = "ep8pp2_to_tp8_pairwise"\ntest_name = "case"\nnum_nodes = 2\ntime_limit = "01:00:00"\n'
    '  [Tests.cmd_args]\n  coalesce_mib = 1024\n  executor = "replay"\n  coalesce_schedule = "pairwise"\n'
    '[[Tests]]\nid = "ep8pp2_to_tp8_both"\ntest_name = "case"\nnum_nodes = 2\ntime_limit = "01:00:00"\n'
    '  [Tests.cmd_args]\n  coalesce_mib = 1024\n  executor = "both"\n  coalesce_schedule = "pairwise"\n'
)


def test_refit_points_show_predicted_seconds_that_follow_the_byte_plan(tmp_path: Path) -> None:
    tests_dir, scenario = write_case(tmp_path / "conf", REFIT_TEST, REFIT_SCENARIO)
    h100 = CONF / "system" / "slurm_h100_ib.toml"
    proc, _ = preflight(tmp_path, scenario, "--tests-dir", str(tests_dir), system=h100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["test"]: r for r in csv.DictReader(io.StringIO((tmp_path / "out" / "preflight.csv").read_text()))}
    tp8, tp4 = rows["ep8pp2_to_tp8"], rows["ep8pp2_to_tp4"]
    for r in (tp8, tp4):
        assert float(r["refit_predicted_s"]) > 0 and float(r["refit_recv_gb_per_gpu"]) > 0, r
        assert "57.68 GB/s" in r["refit_predicted_basis"] and "assumed" in r["refit_predicted_basis"]
    # TP8 -> TP4 doubles the dense bytes each destination GPU holds: a different plan, a different prediction
    assert float(tp4["refit_recv_gb_per_gpu"]) > float(tp8["refit_recv_gb_per_gpu"])
    assert tp4["refit_predicted_s"] != tp8["refit_predicted_s"]
    # the replay executor is priced at its own rate, measured on 4 x H200: the same bytes, fewer seconds
    rp = rows["ep8pp2_to_tp8_replay"]
    assert "248.70 GB/s" in rp["refit_predicted_basis"] and "4x H200" in rp["refit_predicted_basis"], rp
    assert rp["refit_recv_gb_per_gpu"] == tp8["refit_recv_gb_per_gpu"]
    assert float(rp["refit_predicted_s"]) < float(tp8["refit_predicted_s"]) / 3
    # and the pairwise schedule at its own (measured on 4 x H200, host 4 of refit_4gpu/): faster than rounds
    pw = rows["ep8pp2_to_tp8_pairwise"]
    assert "267.44 GB/s" in pw["refit_predicted_basis"], pw
    assert float(pw["refit_predicted_s"]) < float(rp["refit_predicted_s"])
    # executor "both" times two paths in one job: ours is the row's time (the pairwise rate, as the refit page's row),
    # Megatron-Core's own service is priced beside it at its own measured rate, not at a rate of neither path
    both = rows["ep8pp2_to_tp8_both"]
    assert both["refit_predicted_s"] == pw["refit_predicted_s"], both
    assert both["refit_predicted_megatron_s"] == tp8["refit_predicted_s"], both
    assert "ours" in both["refit_predicted_basis"] and "57.68 GB/s" in both["refit_predicted_basis"]
    assert all(rows[t]["refit_predicted_megatron_s"] == "" for t in rows if t != "ep8pp2_to_tp8_both")
    assert f"{both['refit_predicted_s']} (Megatron-Core's {both['refit_predicted_megatron_s']})" in proc.stdout
    html = (tmp_path / "out" / "preflight.html").read_text()
    assert "predicted refit (s)" in html and "prediction, not a measurement" in html and "2 x H200" in html
    assert f"{both['refit_predicted_s']} (Megatron-Core&#x27;s {both['refit_predicted_megatron_s']})" in html
    assert f"<td>{tp8['refit_predicted_s']}</td>" in html and f"<td>{tp4['refit_predicted_s']}</td>" in html
    # the terminal table carries them too, in its own column, with the rates they rest on underneath
    head = next(line for line in proc.stdout.splitlines() if line.startswith("test "))
    assert "refit s (predicted)" in head and "refit GB in/GPU" in head
    line = next(line for line in proc.stdout.splitlines() if line.startswith("ep8pp2_to_tp4 "))
    assert tp4["refit_predicted_s"] in line.split() and tp4["refit_recv_gb_per_gpu"] in line.split()
    assert "refit s (predicted): one refit's seconds" in proc.stdout and "248.70 GB/s/GPU" in proc.stdout
