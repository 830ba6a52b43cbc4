"""The per-run training report (what `generate-report` runs for each MBridgeTraining run folder) of one long rank log:
wall time and peak memory, with the files it wrote.

Method: writes a one-rank Bridge log of ``--iterations`` iterations (benchmarks/log_parse_scale.py's lines, a memory
report every 100) into a temporary folder, then in this process runs the plugin's ``MBridgeTrainingReport`` on it as
CloudAI would (registered strategy, an MBridgeTraining test, the slurm_h100_ib system): parse, mbridge_iterations.csv,
golden_values.json, CloudAI's training_report.json, mbridge_summary.json and the PNG. Peak memory = the process's
VmHWM after the report minus its VmRSS before (the high-water mark reset through /proc/self/clear_refs; Linux only);
n = 1 (no spread). Code path: this checkout's cloudai_mbridge with the CloudAI of this interpreter, CPU only.

usage: python3 benchmarks/report_long_log.py [--iterations 1000000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests"), str(ROOT)]


def status_mib(key: str) -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    raise SystemExit(f"error: /proc/self/status has no {key} (Linux only)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1_000_000)
    args = ap.parse_args()
    import json

    import log_parse_scale
    from cloudai.core import Registry, TestRun
    from cloudai.parser import Parser

    from cloudai_mbridge.registration import register
    from cloudai_mbridge.workloads.reporting import MBridgeTrainingReport

    work = Path(tempfile.mkdtemp(prefix="report_long_log."))
    try:
        run = work / "run"
        run.mkdir()
        start = time.perf_counter()
        size = log_parse_scale.write_training(run, args.iterations)
        took = time.perf_counter() - start
        print(f"log: {args.iterations:,} iterations, {size / 1e6:.0f} MB, written in {took:.0f} s", flush=True)
        register()
        data = {"name": "long", "description": "a long log", "test_template_name": "MBridgeTraining",
                "cmd_args": {"model": "deepseek_v3_proxy", "gpu": "h100"}}
        tdef = Registry().test_definitions_map["MBridgeTraining"].model_validate(data)
        test_run = TestRun(name="long", test=tdef, num_nodes=1, nodes=[], output_path=run)
        system = Parser.parse_system(ROOT / "conf" / "system" / "slurm_h100_ib.toml")
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        base = status_mib("VmRSS")
        start = time.perf_counter()
        MBridgeTrainingReport(system, test_run).generate_report()
        wall = time.perf_counter() - start
        peak = status_mib("VmHWM") - base
        print(f"per-run report: {wall:.0f} s wall, peak +{peak:.0f} MiB over the {base:.0f} MiB before it")
        for f in sorted(p for p in run.iterdir() if p.is_file()):
            print(f"  wrote {f.name}: {f.stat().st_size:,} B")
        note = json.loads((run / "mbridge_summary.json").read_text(encoding="utf-8")).get("training_report")
        print(f"  summary's training_report note: {note}")
        print(f"RESULT report_long_log_s_{args.iterations}_iterations={wall:.0f} s")
        print(f"RESULT report_long_log_peak_mib_{args.iterations}_iterations={peak:.0f} MiB")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
