"""The refit page with executor "both": Megatron-Core's copy service and ours side by side per mapping, each as % of
the same job's exchange ceiling, with n and the speed-up with its 95 % interval ("not distinguishable" when the
interval holds 1). Numbers shaped like the 2 x H200 record (Megatron-Core's service 102.43 ms median)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from test_report_readability import _refit_row

MEGATRON = [101.9, 102.2, 102.43, 102.6, 103.1, 102.0, 102.9, 102.5]
OURS = [40.1, 40.4, 40.6, 40.9, 41.2, 40.3, 40.7, 40.8]
CEILING = {"times_ms": [30.2, 30.3, 30.4, 30.3, 30.1, 30.5, 30.3, 30.2], "median_ms": 30.3, "bytes_remote": 1 << 30}


def _both_row(src: str, dst: str, theirs: list[float], ours: list[float]) -> dict:
    from cloudai_mbridge.reports.refit_table import compare_paths

    compare = {"megatron": {"service": "nccl", "times_ms": theirs},
               "ours": {"executor": "replay", "coalesce_mib": 1024, "schedule": "pairwise", "times_ms": ours},
               "ceiling": CEILING}
    return {**_refit_row(src, dst, ours), **compare_paths(compare)}


def _page(tmp_path: Path) -> str:
    from cloudai_mbridge.reports.provenance import collect
    from cloudai_mbridge.reports.refit_table import write_refit_report

    rows = [_both_row("TP2·EP1", "TP1·EP2", MEGATRON, OURS),
            # the same medians' neighbourhood, but overlapping series: the interval holds 1
            _both_row("TP4·EP1", "TP1·EP4", [40.0, 60.0, 41.0, 55.0], [42.0, 39.0, 58.0, 45.0]),
            _refit_row("TP8·EP1", "TP1·EP8", [10.0, 10.1, 10.2])]  # one path only: no comparison row
    write_refit_report(tmp_path, "Refit: t", rows, collect(tmp_path, []))
    return re.sub(r"\s+", " ", (tmp_path / "mbridge_refit.html").read_text())


def test_the_page_puts_megatrons_service_and_ours_side_by_side_with_the_speedup_and_its_interval(tmp_path):
    page = _page(tmp_path)
    assert "Megatron-Core&#x27;s copy service vs ours (same job, same ranks, same ceiling)" in page
    # each path's median, % of the same ceiling (30.3 / median x 100) and n
    assert ("TP2·EP1 → TP1·EP2</b> (collocated, nccl): Megatron-Core&#x27;s service 102.47 ms, 29.6 %, n = 8; "
            "ours 40.65 ms, 74.5 %, n = 8") in page
    m = re.search(r"speed-up of ours 2\.52x \[(\d\.\d\d)\.\.(\d\.\d\d)\] \(95 % interval\) <span[^>]*>ours faster<",
                  page)
    assert m and 1.0 < float(m.group(1)) < 2.52 < float(m.group(2)), page
    assert re.search(r"speed-up of ours [\d.]+x \[0\.\d\d\.\.1\.\d\d\] \(95 % interval\) <span[^>]*>not "
                     r"distinguishable<", page), page
    assert "<td class='text'>2.52x [" in page and "], ours faster</td>" in page  # the table's cell
    assert "30.30 ms, n = 8" in page  # the ceiling column
    assert page.count("TP8·EP1 → TP1·EP8") >= 1 and "TP8·EP1 → TP1·EP8</b> (collocated" not in page
    with (tmp_path / "mbridge_refit.csv").open() as f:
        table = {r["src_layout"]: r for r in csv.DictReader(f)}
    assert table["TP2·EP1"]["speedup_verdict"] == "ours faster"
    assert float(table["TP2·EP1"]["megatron_pct_of_ceiling"]) == 30.3 / 102.465 * 100
    assert table["TP4·EP1"]["speedup_verdict"] == "not distinguishable"
    assert float(table["TP4·EP1"]["speedup_ci95_lo"]) < 1.0 < float(table["TP4·EP1"]["speedup_ci95_hi"])
    assert table["TP8·EP1"]["speedup_verdict"] == ""


def test_fewer_than_three_refits_a_side_are_not_distinguishable_however_far_apart():
    from cloudai_mbridge.reports.refit_table import compare_paths

    got = compare_paths({"megatron": {"times_ms": [100.0, 101.0]}, "ours": {"times_ms": [40.0, 41.0]},
                         "ceiling": None})
    assert got["speedup"] > 2 and got["speedup_verdict"] == "not distinguishable"
    assert got["megatron_pct_of_ceiling"] is None and got["ceiling_median_ms"] is None


def test_the_shipped_refit_scenarios_time_megatrons_service_and_ours_in_each_job():
    import tomllib

    from cloudai_mbridge.payload.refit.config import from_dict, validate

    conf = Path(__file__).resolve().parent.parent / "conf"
    tests = {}
    for path in sorted((conf / "test").glob("*refit*.toml")):
        data = tomllib.loads(path.read_text())
        tests[data["name"]] = data["cmd_args"]
        args = data["cmd_args"]
        assert (args.get("executor"), args.get("coalesce_schedule")) == ("both", "pairwise"), path
        assert args.get("coalesce_mib", 0) > 0, path
    assert {"kimi_k2_refit", "refit_cpu_smoke"} <= set(tests)
    for path in sorted((conf / "test_scenario").glob("*refit*.toml")):
        for t in tomllib.loads(path.read_text())["Tests"]:
            over = t.get("cmd_args", {})
            assert "executor" not in over and "coalesce_mib" not in over, (path, t["id"])
            # what the payload gets: its own validation accepts "both" with every transport named (nvshmem too)
            merged = {**tests[t["test_name"]], **over}
            cfg = from_dict({"model": {"name": "m", "num_layers": 1, "hidden_size": 64, "ffn_hidden_size": 128,
                                       "moe_ffn_hidden_size": 32, "num_attention_heads": 4, "num_experts": 8,
                                       "moe_router_topk": 2, "vocab_size": 200, "seq_length": 64},
                             "src": {"tp": 1}, "dst": {"tp": 1},
                             **{k: merged[k] for k in ("transport", "executor", "coalesce_mib", "coalesce_schedule",
                                                       "device", "mode")}})
            validate(cfg)


def test_the_gpu_one_liner_runs_both_paths_in_one_job_and_prints_them_against_one_ceiling():
    import shlex

    import gpu_refit_nccl as bench  # benchmarks/ is on pytest's pythonpath

    script = (Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_refit_run.sh").read_text()
    defaults = re.findall(r'_ARGS=\$\{REFIT_W\d_ARGS:-"(.*?)"\}', script.replace("\\\n", ""), re.S)
    assert len(defaults) == 2
    for line in defaults:
        args = bench.parse_args(["--out", "/x", *shlex.split(line)])
        runs = bench.refit_runs(args)
        assert runs and all(ex == "both" and c == 1024 and sc == "pairwise" for _, _, c, _, ex, sc, _ in runs)
        assert len(runs) == len(args.transports) * len(args.pairs)  # every transport, one job each
        for p, t, c, ov, ex, sc, e in runs:
            cfg = bench.refit_config(p, 1, args, c, t, ov, ex, sc, e)
            assert cfg["executor"] == "both" and bench.run_name(p, 1, t, c, ov, ex, sc, e).endswith("_vs_pw")
            from cloudai_mbridge.payload.refit.config import derive_layouts, from_dict

            derive_layouts(from_dict(cfg), args.world)  # the pair's layouts hold on the one-liner's world
    # a recorded row: 10 GB remote over 2 GPUs, a p2p ceiling of 164.9 GB/s per GPU
    row = {"median_ms": 40.65, "bytes_remote": 10**10, "bytes_local": 0, "recv_ops": 10,
           "compare": {"megatron": {"times_ms": MEGATRON}, "ours": {"times_ms": OURS}, "ceiling": CEILING}}
    bench.derive(row, 2, {"mode": "exchange", "bytes": 1 << 30, "ops": 1, "gbps_per_gpu": 164.9}, [])
    lines = bench.paths_results("refit_nccl_x", row["paths"])
    got = dict(x.removeprefix("RESULT refit_nccl_x_").split("=", 1) for x in lines)
    assert got["megatron_pct_of_p2p"] == "29.6 %" and got["ours_pct_of_p2p"] == "74.6 %"
    assert got["megatron_n"] == got["ours_n"] == "8" and got["speedup"] == "2.521 x"
    lo, hi = map(float, got["speedup_ci95"].removesuffix(" x").split(".."))
    assert 1.0 < lo < 2.521 < hi and got["speedup_verdict"] == "ours_faster"


def test_a_dry_run_sends_both_to_the_payload_with_every_transport_and_refuses_it_without_coalescing(tmp_path):
    from test_dry_run import _refit_sweep

    res, configs = _refit_sweep(tmp_path, 'executor = ["megatron", "both"]\ntransport = ["nccl", "nvshmem"]\n'
                                          'coalesce_mib = [0, 1024]\n')
    assert sorted((c["executor"], c["transport"], c["coalesce_mib"]) for c in configs) == [
        ("both", "nccl", 1024), ("both", "nvshmem", 1024), ("megatron", "nccl", 0), ("megatron", "nccl", 1024),
        ("megatron", "nvshmem", 0)]
    assert "[refit-executor-coalesce]" in res.output and "executor both replays the plan" in res.output
