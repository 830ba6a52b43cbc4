"""The plugin's A/B and refit pages from recorded real GPU runs, with one command and no GPU:

    python3 -m cloudai_mbridge.reports.demo --output-dir results/demo

The runs are the rank logs in tests/fixtures/logs/gpu (see SOURCES.md there): the dispatcher A/B (alltoall against
flex/DeepEP through UCCL-EP, kimi_k2_proxy, 2 x H200, mbs 1 and 4, 30 iterations each) and three Megatron-Core refits
over NCCL on the same machine. They are copied under ``<output-dir>/runs/`` (so the pages' links to the logs work),
then the plugin's own report code writes mbridge_ab.html / .csv / *.png and mbridge_refit.html / .csv / .png into
``<output-dir>``. Nothing is written anywhere else. The machine's record of the device command
(benchmarks/results/gpu_dispatcher_ab.json and gpu_refit_nccl.json, "provenance") supplies what the logs do not
carry: GPUs, driver, date and software versions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GPU_RUNS = ROOT / "tests" / "fixtures" / "logs" / "gpu"
RECORD = ROOT / "benchmarks" / "results" / "gpu_dispatcher_ab.json"  # the A/B device command's own record
REFIT_RECORD = ROOT / "benchmarks" / "results" / "gpu_refit_nccl.json"  # the refit device command's
AB_RUNS = ("ab_mbs1_overlap-off_alltoall", "ab_mbs1_overlap-off_deepep", "ab_mbs4_overlap-off_alltoall",
           "ab_mbs4_overlap-off_deepep")
REFIT_RUNS = ("refit_tp2-ep2_1l", "refit_tp2-ep2_2l", "refit_tp1ep2-tp2ep1_2l")
SYSTEM = "nvidia-h200-x2 (recorded GPU runs)"


def recorded_provenance(record: Path) -> dict[str, str]:
    """What the device command recorded about itself (provenance.py of benchmarks/): GPUs, driver, versions."""
    try:
        from ..safe_read import MAX_JSON_BYTES, InputFileError, read_text

        prov = json.loads(read_text(record, MAX_JSON_BYTES, "the device record")).get("provenance") or {}
    except (OSError, ValueError, InputFileError):
        return {}
    out: dict[str, str] = {}
    gpus = prov.get("gpus")
    if isinstance(gpus, list) and gpus:
        names = sorted(set(map(str, gpus)))
        out["GPUs"] = ", ".join(f"{gpus.count(n)} x {n}" for n in names)
    smi = str(prov.get("nvidia_smi") or "").splitlines()
    if smi and len(smi[0].split(", ")) >= 3:
        out["driver"] = smi[0].split(", ")[2]
    for key in ("host", "date_utc", "megatron_core", "torch", "cuda", "nccl", "python", "command"):
        if prov.get(key):
            out[key] = str(prov[key])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m cloudai_mbridge.reports.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--output-dir", type=Path, default=Path("results/demo"),
                        help="where the pages and a copy of the runs go (default: results/demo)")
    parser.add_argument("--runs", type=Path, default=GPU_RUNS, help="the recorded run folders (default: %(default)s)")
    args = parser.parse_args(argv)
    from .._cloudai import CloudAIMissingError, require_cloudai

    try:  # the report code reads runs through CloudAI's test-run objects
        require_cloudai()
    except CloudAIMissingError as exc:
        print(f"demo: {exc} Or run the demo with the Python of the checkout's .venv (scripts/quickstart.sh "
              f"--setup-only makes it): .venv/bin/python -m cloudai_mbridge.reports.demo --output-dir "
              f"{args.output_dir}", file=sys.stderr)
        return 2
    missing = [name for name in (*AB_RUNS, *REFIT_RUNS) if not (args.runs / name / "mbridge_config.json").is_file()]
    if missing:
        print(f"demo: {args.runs} lacks {', '.join(missing)}: the recorded GPU runs ship with the source checkout "
              "(tests/fixtures/logs/gpu). Fix: run this from a checkout, or pass --runs", file=sys.stderr)
        return 2
    from ..redact import install

    install()
    out = args.output_dir.resolve()
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    copies = {}
    for name in (*AB_RUNS, *REFIT_RUNS):
        target = runs / name
        if target.exists():
            shutil.rmtree(target)
        copies[name] = Path(shutil.copytree(args.runs / name, target))
    from .folders import ab_report, refit_report

    record = recorded_provenance(RECORD)
    rows = ab_report([copies[n] for n in AB_RUNS], out, warmup=4, name="gpu_dispatcher_ab (recorded runs)",
                     system=SYSTEM, elsewhere=record, elsewhere_source=_source(RECORD, record))
    record = recorded_provenance(REFIT_RECORD)
    refit_report([copies[n] for n in REFIT_RUNS], out, "gpu_refit_nccl (recorded runs)", system=SYSTEM,
                 elsewhere=record, elsewhere_source=_source(REFIT_RECORD, record))
    print(_summary(rows, out))
    return 0


def _source(path: Path, record: dict[str, str]) -> str | None:
    return f"{path.relative_to(ROOT)} (the device command's own record)" if record else None


def _summary(rows: list[dict[str, Any]], out: Path) -> str:
    lines = [f"{r['cell']}: {r['arm']} vs {r['baseline']} {r['delta_pct']:+.1f} % [{r['delta_ci95_pct']}], "
             f"{r['verdict']}" for r in rows if r.get("delta_pct") is not None]
    return "\n".join([*lines, f"wrote {out / 'mbridge_ab.html'} and {out / 'mbridge_refit.html'}"])


if __name__ == "__main__":
    sys.exit(main())
