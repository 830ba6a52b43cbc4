"""Issue 26: damaged refit results through the real ``generate-report``. The refit report must not trust what it
reads: a verification summary that its own per-tensor results contradict, a config edited after the run, rank logs
copied in from another run, JSON nested past the interpreter's limit and bytes that are not text inside the timing
lines each make *that* run invalid (a row without a time, with the reason), never give it a number, never lose the
other row or the other reports, never print a traceback.

The results tree is a real dry-run of conf/test_scenario/refit_cpu_smoke.toml (four mappings from TP2·EP2, four
ranks on the local Slurm system); each rank log is what the refit payload prints, made by the payload's own functions
(payload/refit/__main__.py: config_header, rank_line, _report), for the run's own mbridge_config.json.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import CONF, dry_run, sbatch_scripts

from hostile.harness import fork_jobs

SYSTEM = CONF / "system" / "local_slurm.toml"
SCENARIO = CONF / "test_scenario" / "refit_cpu_smoke.toml"
TENSORS = [f"decoder.layers.0.mlp.experts.local_experts.{i}.linear_fc1.weight" for i in range(8)] + [
    "embedding.word_embeddings.weight", "output_layer.weight"]
TIMES = {"TP1·EP4": [50.0, 51.0, 52.0], "TP4·EP1": [40.0, 41.0, 42.0], "TP1·EP1": [60.0, 61.0, 62.0],
         "TP4·EP4": [70.0, 71.0, 72.0]}  # ms per timed refit


def payload_logs(run: Path, times: list[float]) -> None:
    """The rank logs the refit payload writes for this run folder's config (4 ranks, verification passed)."""
    from cloudai_mbridge.payload.refit import __main__ as payload
    from cloudai_mbridge.payload.refit.config import config_digest, derive_layouts, load

    argv = ["--config", str(run / "mbridge_config.json")]
    cfg, digest = load(argv), config_digest(argv)
    src, dst = derive_layouts(cfg, 4)
    header = payload.config_header(cfg, src, dst, 4, digest)
    verdict = {"status": "pass", "params": len(TENSORS), "mismatched": 0, "detail": "nan-each-iter+shard-ref+gather",
               "tensors": dict.fromkeys(TENSORS, "ok")}
    stats = {"bytes_remote": 4_000_000, "bytes_local": 1_000_000, "send_ops": 12, "recv_ops": 12}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print("REFIT_CONFIG " + json.dumps(header, sort_keys=True))
        print(payload.rank_line(0, cfg, digest))
        payload._report(cfg, header, times, stats, verdict, 5_000_000)
    (run / "logs").mkdir(exist_ok=True)
    (run / "logs" / "rank-0.log").write_text(out.getvalue())
    for rank in (1, 2, 3):
        (run / "logs" / f"rank-{rank}.log").write_text(payload.rank_line(rank, cfg, digest) + "\n[refit] done\n")


def _runs(root: Path) -> dict[str, Path]:
    runs = {}
    for cfg in root.rglob("mbridge_config.json"):
        dst = json.loads(cfg.read_text())["dst"]
        runs[f"TP{dst['tp']}·EP{dst['ep']}"] = cfg.parent
    return runs


def _rank0(run: Path) -> Path:
    return run / "logs" / "rank-0.log"


def _edit(run: Path, fn: Callable[[str], str]) -> None:
    _rank0(run).write_text(fn(_rank0(run).read_text()))


def _edit_bytes(run: Path, fn: Callable[[bytes], bytes]) -> None:
    _rank0(run).write_bytes(fn(_rank0(run).read_bytes()))


def _mismatch_tensors(text: str, n: int) -> str:
    """Per-tensor results say n tensors differ; the summary still says pass, 0 mismatched."""
    for name in TENSORS[:n]:
        text = text.replace(f"result=ok name={name}\n", f"result=mismatch name={name}\n")
    return text


def _config(run: Path, edit: Callable[[dict], None]) -> None:
    path = run / "mbridge_config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def _copy_logs_from(other: str, ranks: tuple[int, ...] = (0, 1, 2, 3)) -> Callable[[Path, dict[str, Path]], None]:
    def damage(run: Path, runs: dict[str, Path]) -> None:
        for rank in ranks:
            shutil.copy(runs[other] / "logs" / f"rank-{rank}.log", run / "logs" / f"rank-{rank}.log")
    return damage


DEEP = "[" * 100_000 + "]" * 100_000

# Every case damages the TP1·EP4 run; the other three keep their rows, times and "ok".
DAMAGE: dict[str, Callable[[Path, dict[str, Path]], None]] = {
    "verify-pass-beside-mismatched-tensors": lambda r, _: _edit(r, lambda t: _mismatch_tensors(t, 5)),
    "verify-pass-with-mismatched-count": lambda r, _: _edit(r, lambda t: re.sub(
        r"REFIT_TENSOR .*\n", "", t).replace("mismatched=0 detail", "mismatched=5 detail")),
    "verify-tensor-lines-removed": lambda r, _: _edit(r, lambda t: re.sub(r"REFIT_TENSOR .*\n", "", t)),
    "verify-result-copy-disagrees": lambda r, _: _edit(r, lambda t: t.replace(
        '"mismatched": 0, "params": 10, "status": "pass"', '"mismatched": 3, "params": 10, "status": "fail"')),
    "config-edited-after-run": lambda r, _: _config(r, lambda d: d["dst"].update(tp=2, ep=2)),
    "config-run-id-edited": lambda r, _: _config(r, lambda d: d.update(run_id="0" * 32)),
    "logs-copied-from-another-run": _copy_logs_from("TP4·EP1"),
    "rank0-log-copied-from-another-run": _copy_logs_from("TP4·EP1", (0,)),
    "one-rank-log-copied-from-another-run": _copy_logs_from("TP4·EP1", (2,)),
    "result-json-nested-100k-deep": lambda r, _: _edit(r, lambda t: re.sub(
        r"REFIT_RESULT .*", lambda m: 'REFIT_RESULT {"a": ' + DEEP + "}", t)),
    "config-line-json-nested-100k-deep": lambda r, _: _edit(r, lambda t: re.sub(
        r"REFIT_CONFIG .*", lambda m: 'REFIT_CONFIG {"a": ' + DEEP + "}", t)),
    "non-utf8-inside-iteration-times": lambda r, _: _edit_bytes(r, lambda b: re.sub(
        rb"time_ms=(\d+)\.", lambda m: b"time_ms=" + m.group(1) + b"\xff.", b, count=2)),
    "non-utf8-inside-iteration-prefix": lambda r, _: _edit_bytes(r, lambda b: b.replace(
        b"REFIT_ITER iter=1 ", b"REFIT_\xfeTER iter=1 ")),
    "non-utf8-inside-verify-line": lambda r, _: _edit_bytes(r, lambda b: b.replace(b"REFIT_VERIFY status=",
                                                                                    b"REFIT_VERIFY st\xffatus=")),
    "iteration-lines-deleted-with-their-summary": lambda r, _: _edit(r, lambda t: re.sub(
        r"REFIT_ITER iter=[12] .*\n|.*refit time:.*\n", "", t)),
}
# What the damaged row says (a fragment of its status or failure text, lower case)
REASON = {
    "verify-pass-beside-mismatched-tensors": "5 of 10 tensors differ",
    "verify-pass-with-mismatched-count": "pass with 5 mismatched",
    "verify-tensor-lines-removed": "no per-tensor results",
    "verify-result-copy-disagrees": "refit_result's verify",
    "config-edited-after-run": "edited after the run",
    "config-run-id-edited": "another run",
    "logs-copied-from-another-run": "another run",
    "rank0-log-copied-from-another-run": "another run",
    "one-rank-log-copied-from-another-run": "rank 2's log is from run",
    "result-json-nested-100k-deep": "nested deeper",
    "config-line-json-nested-100k-deep": "nested deeper",
    "non-utf8-inside-iteration-times": "damaged bytes",
    "non-utf8-inside-iteration-prefix": "damaged bytes",
    "non-utf8-inside-verify-line": "damaged bytes",
    "iteration-lines-deleted-with-their-summary": "configured for 3",
}


def _rows(root: Path) -> dict[str, dict[str, str]]:
    path = root / "mbridge_refit.csv"
    # keyed by TP·EP (the page adds ETP1 where the destination's expert TP differs from its TP)
    return ({r["dst_layout"].removesuffix("·ETP1"): r for r in csv.DictReader(path.read_text().splitlines())}
            if path.is_file() else {})


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("refit")
    res = dry_run(SYSTEM, SCENARIO, base)
    assert res.returncode == 0, res.output
    root = next(res.output_dir.iterdir())
    assert len(sbatch_scripts(res.output_dir)) == 4
    for name, run in _runs(root).items():
        payload_logs(run, TIMES[name])
    return base, root


@pytest.fixture(scope="module")
def reports(tree: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    base, root = tree
    jobs, cases = [], {}
    for name, damage in {"intact": lambda r, runs: None, **DAMAGE}.items():
        case = tmp_path_factory.mktemp(name)
        shutil.copytree(base, case, dirs_exist_ok=True)
        case_root = case / root.relative_to(base)
        runs = _runs(case_root)
        target = runs["TP1·EP4"]
        damage(target, runs)
        jobs.append({"argv": ["--log-file", str(case / "debug.log"), "generate-report", "--system-config",
                              str(SYSTEM), "--test-scenario", str(SCENARIO), "--result-dir", str(case_root)],
                     "cwd": str(case), "env": dict(os.environ), "log": str(case / "terminal.txt")})
        cases[name] = {"root": case_root, "case": case, "target": target}
    codes = fork_jobs(jobs, tmp_path_factory.mktemp("jobs"))
    for info, code in zip(cases.values(), codes, strict=True):
        info["code"] = code
        info["output"] = (info["case"] / "terminal.txt").read_text(errors="replace")
        info["rows"] = _rows(info["root"])
    return cases


def test_the_intact_tree_times_both_mappings(reports: dict) -> None:
    r = reports["intact"]
    assert r["code"] == 0, r["output"][-3000:]
    rows = r["rows"]
    assert {k: (v["status"], v["verification"], float(v["time_ms_median"])) for k, v in rows.items()} == {
        k: ("ok", "pass", times[1]) for k, times in TIMES.items()}
    assert rows["TP1·EP4"]["mapping"] == "TP2·EP2 → TP1·EP4"


@pytest.mark.parametrize("name", list(DAMAGE))
def test_a_damaged_refit_run_gives_no_number_and_keeps_the_other_row(reports: dict, name: str) -> None:
    r = reports[name]
    assert "Traceback" not in r["output"], r["output"][-3000:]
    assert r["code"] == 0, r["output"][-3000:]
    rows = r["rows"]
    # the damaged run is labelled by what ran (TP2·EP2 → TP1·EP4), whatever its config file says now
    assert set(rows) == set(TIMES), (rows, r["output"][-2000:])
    bad = rows["TP1·EP4"]
    assert bad["mapping"] == "TP2·EP2 → TP1·EP4"
    assert bad["status"] != "ok" and not bad["time_ms_median"] and not bad["bandwidth_gbps"], bad
    assert REASON[name] in (bad["status"] + " " + bad["failure"]).lower(), bad
    for other, times in TIMES.items():
        if other != "TP1·EP4":
            good = rows[other]
            assert (good["status"], good["verification"], float(good["time_ms_median"])) == ("ok", "pass", times[1])
    page = (r["root"] / "mbridge_refit.html").read_text()
    assert "no verified mapping" not in page and "fastest <b>→ TP4·EP1" in page


@pytest.mark.parametrize("where", ["golden", "config"])
def test_json_nested_100k_deep_is_a_damaged_file_not_a_crash(tmp_path: Path, where: str) -> None:
    """A golden-values file or a run's config nested 100k deep: that file is unreadable (said so), nothing raises."""
    from test_reports import fake_run

    from cloudai_mbridge.metrics import compare_golden, load_layout, parse_training_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "mbridge_config.json").write_text(json.dumps({"world_size": 1, "dispatcher": "alltoall", "gbs": 16,
                                                         "seq_length": 128, "workload": "training"}))
    fake_run(run, [100.0] * 12, [11.0 - 0.1 * i for i in range(12)], "alltoall")
    deep = tmp_path / "deep.json"
    deep.write_text('{"lm loss": {"values": ' + DEEP + "}}")
    if where == "golden":
        result = compare_golden(parse_training_run(run), deep)
        assert not result.passed and "nested" in result.error and "deep" in result.error
    else:
        shutil.copy(deep, run / "mbridge_config.json")
        assert load_layout(run).config_status == "invalid"
        assert "invalid_config" in parse_training_run(run).problems


def test_a_report_that_cannot_be_written_makes_generate_report_fail(tree: tuple[Path, Path], tmp_path: Path) -> None:
    """CloudAI logs a scenario report that raised and goes on; generate-report must not then exit 0."""
    from helpers import run_cli

    base, root = tree
    shutil.copytree(base, tmp_path, dirs_exist_ok=True)
    case_root = tmp_path / root.relative_to(base)
    (case_root / "mbridge_refit.csv").mkdir()  # the report's CSV cannot be replaced: that report fails
    proc = run_cli("generate-report", "--system-config", str(SYSTEM), "--test-scenario", str(SCENARIO),
                   "--result-dir", str(case_root), cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "could not be written" in output and "mbridge_refit.csv" in output and "Traceback" not in output
