"""The plugin's A/B and refit pages from recorded real GPU runs, with one command and no GPU:

    python3 -m cloudai_mbridge.reports.demo --output-dir results/demo

The A/B page shows the best recorded dispatcher A/B cell (:func:`best_cell`): among the cell folders of
benchmarks/results/bridge_ab_4gpu/ that benchmarks/ab_cells.py counts (>= 3 process starts per arm, the same routing
in every run, the loss inside the baseline's envelope, a verdict), those whose runs all used the Megatron-Bridge
engine; of those, the most starts per arm, then a cell run through ``cloudai run`` itself (its folder keeps
CloudAI's ``mbridge_inputs/``), then one that recorded where the time went (dispatch / combine / the rest). Today that
is dsv3_mbs1_hybridep_2gpu_h10 (DeepSeek-V3 proxy, alltoall against hybridep, 3 + 3 starts through ``cloudai run`` on
2 x H200, 2026-11-29, with the time split). The refit page shows three Megatron-Core refits over NCCL
from tests/fixtures/logs/gpu (see SOURCES.md there; 2 x H200, 2026-11-22), with the record of their device command
(benchmarks/results/gpu_refit_nccl.json, "provenance") for what their logs do not carry.

The runs are copied under ``<output-dir>/runs/`` (so the pages' links to the logs work), then the plugin's own report
code writes mbridge_ab.html / .csv / *.png and mbridge_refit.html / .csv / .png into ``<output-dir>``. Nothing is
written anywhere else. The pages say where their runs come from: the record's folder, how they ran, engine, GPUs,
dates and software as the runs' own files recorded them.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GPU_RUNS = ROOT / "tests" / "fixtures" / "logs" / "gpu"
AB_CELLS = ROOT / "benchmarks" / "results" / "bridge_ab_4gpu"  # the recorded dispatcher A/B cells, one per folder
AB_CELLS_RULE = ROOT / "benchmarks" / "ab_cells.py"  # which recorded cells count (why_not)
REFIT_RECORD = ROOT / "benchmarks" / "results" / "gpu_refit_nccl.json"  # the refit device command's own record
REFIT_RUNS = ("refit_tp2-ep2_1l", "refit_tp2-ep2_2l", "refit_tp1ep2-tp2ep1_2l")
SYSTEM = "nvidia-h200-x2 (recorded GPU runs)"


@dataclass
class RecordedCell:
    """A recorded A/B cell folder: its run folders, the recorded report's rows and what makes it count or not."""

    folder: Path
    runs: list[Path]
    rows: list[dict[str, str]]
    counts: bool
    why_not: str | None
    engines: set[str]
    via_cloudai: bool

    @property
    def starts(self) -> int:
        """The fewest starts of an arm in the recorded rows (what bounds the verdict)."""
        return min((min(_int(r.get("base_starts")), _int(r.get("arm_starts"))) for r in self.rows if r.get("arm")),
                   default=0)

    @property
    def time_split(self) -> bool:
        """Every paired row recorded where the time went (dispatch / combine / the rest: the payload's timer)."""
        paired = [r for r in self.rows if r.get("arm")]
        return bool(paired) and all(r.get("time_split") == "recorded" for r in paired)


def _int(text: Any) -> int:
    try:
        return int(str(text))
    except ValueError:
        return 0


def _rule() -> Any:
    """benchmarks/ab_cells.py's ``why_not``: the project's one rule for which recorded cells count."""
    spec = importlib.util.spec_from_file_location("_mbridge_ab_cells", AB_CELLS_RULE)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(AB_CELLS_RULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.why_not


def recorded_cells(root: Path = AB_CELLS) -> list[RecordedCell]:
    """Every cell folder under ``root`` with a recorded mbridge_ab.csv, judged by benchmarks/ab_cells.py's rule."""
    why_not = _rule()
    cells = []
    for folder in sorted(p for p in root.iterdir() if (p / "mbridge_ab.csv").is_file()):
        with (folder / "mbridge_ab.csv").open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        runs = sorted(c.parent for c in folder.rglob("mbridge_config.json") if (c.parent / "logs").is_dir())
        engines = set()
        for run in runs:
            try:
                engines.add(str(json.loads((run / "mbridge_config.json").read_text(encoding="utf-8")).get("engine")))
            except (OSError, ValueError, AttributeError):
                engines.add("unreadable")
        paired = [r for r in rows if r.get("arm")]
        reasons = [why_not(r) for r in paired]
        why = next((w for w in reasons if w), None) or (None if paired else "no paired arm")
        cells.append(RecordedCell(folder, runs, rows, why is None, why, engines, (folder / "mbridge_inputs").is_dir()))
    return cells


def best_cell(cells: list[RecordedCell]) -> RecordedCell | None:
    """The best recorded evidence: a cell that counts and ran the bridge engine only; the most starts per arm, then
    one run through ``cloudai run``, then one that recorded where the time went (the page's dispatch / combine /
    rest split), then the most runs."""
    eligible = [c for c in cells if c.counts and c.engines == {"bridge"}]
    return max(eligible, key=lambda c: (c.starts, c.via_cloudai, c.time_split, len(c.runs), c.folder.name),
               default=None)


def cell_provenance(cell: RecordedCell, copies: list[Path], eligible: int) -> tuple[dict[str, str], str, str, str]:
    """(rows for the provenance block, the page's "where the runs come from" line, the system, the scenario) from
    the cell's own files: its runs' configs and logs, CloudAI's log and inputs where it ran through ``cloudai run``."""
    from .provenance import recorded_versions

    configs = [json.loads((run / "mbridge_config.json").read_text(encoding="utf-8")) for run in cell.runs]
    versions = [recorded_versions(run) for run in copies]
    gpus = sorted({f"{c.get('world_size')} x {str(c.get('gpu')).upper()}" for c in configs})
    machines = sorted({v["machine"] for v in versions if v.get("machine")})
    dates = sorted({v["date_utc"][:10] for v in versions if v.get("date_utc")})
    folder = cell.folder.relative_to(ROOT).as_posix() + "/"
    system, scenario = f"recorded cell {cell.folder.name}", cell.folder.name
    log = cell.folder / "cloudai_ab.log"
    how = "benchmarks/gpu_dispatcher_ab.py (one process start per run)"
    if cell.via_cloudai and log.is_file():
        seen = {}
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines()[:40]:
            for key in ("System Name", "Test Scenario Name"):
                if f"[INFO] {key}: " in line:
                    seen[key] = line.split(f"[INFO] {key}: ", 1)[1].strip()
        system = seen.get("System Name", system)
        scenario = seen.get("Test Scenario Name", scenario)
        how = f"cloudai run, test scenario {scenario} on system {system} (CloudAI's log: {folder}cloudai_ab.log)"
    row = next(r for r in cell.rows if r.get("arm"))
    software = ", ".join(f"{name} {versions[0][key]}" for key, name in (
        ("megatron_bridge", "Megatron-Bridge"), ("megatron_core", "Megatron-Core"),
        ("transformer_engine", "Transformer Engine"), ("torch", "PyTorch"), ("nccl", "NCCL")) if key in versions[0])
    elsewhere = {
        "record": folder,
        "how the runs ran": how,
        "GPUs": f"{' / '.join(gpus)} per run (the runs' mbridge_config.json)"
                + (f"; {'one machine' if len(machines) == 1 else f'{len(machines)} machines'}: {', '.join(machines)} "
                   "(MBRIDGE_VERSIONS)" if machines else ""),
        "why this cell": f"benchmarks/ab_cells.py counts it ({row.get('base_starts')} + {row.get('arm_starts')} "
                         "starts, same routing, work gate passed) and every run used the bridge engine; of the "
                         f"{eligible} such recorded cell folder(s), one with the most starts per arm"
                         + (" and run through cloudai run itself" if cell.via_cloudai else ""),
    }
    note = (f"the recorded cell {folder}: {row.get('baseline')} against {row.get('arm')}, {row.get('base_starts')} + "
            f"{row.get('arm_starts')} starts, run by {'cloudai run' if cell.via_cloudai else 'gpu_dispatcher_ab.py'}; "
            f"engine bridge ({software or 'versions not recorded in the logs'}); {' / '.join(gpus)}; "
            f"{', '.join(dates) or 'date not recorded'}")
    return elsewhere, note, system, scenario


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
    parser.add_argument("--runs", type=Path, default=GPU_RUNS,
                        help="the recorded refit run folders (default: %(default)s)")
    parser.add_argument("--ab-cells", type=Path, default=AB_CELLS,
                        help="the recorded A/B cell folders, the best one is shown (default: %(default)s)")
    args = parser.parse_args(argv)
    from .._cloudai import CloudAIMissingError, require_cloudai

    try:  # the report code reads runs through CloudAI's test-run objects
        require_cloudai()
    except CloudAIMissingError as exc:
        print(f"demo: {exc} Or run the demo with the Python of the checkout's .venv (scripts/quickstart.sh "
              f"--setup-only makes it): .venv/bin/python -m cloudai_mbridge.reports.demo --output-dir "
              f"{args.output_dir}", file=sys.stderr)
        return 2
    missing = [name for name in REFIT_RUNS if not (args.runs / name / "mbridge_config.json").is_file()]
    if missing:
        print(f"demo: {args.runs} lacks {', '.join(missing)}: the recorded GPU runs ship with the source checkout "
              "(tests/fixtures/logs/gpu). Fix: run this from a checkout, or pass --runs", file=sys.stderr)
        return 2
    try:
        cells = recorded_cells(args.ab_cells)
    except OSError as exc:
        print(f"demo: the recorded A/B cells cannot be read ({exc}): they ship with the source checkout "
              "(benchmarks/results/bridge_ab_4gpu, benchmarks/ab_cells.py). Fix: run this from a checkout, or pass "
              "--ab-cells", file=sys.stderr)
        return 2
    cell = best_cell(cells)
    if cell is None:
        print(f"demo: no recorded A/B cell under {args.ab_cells} counts (benchmarks/ab_cells.py) with the bridge "
              "engine in every run: nothing to show", file=sys.stderr)
        return 2
    from ..redact import install

    install()
    out = args.output_dir.resolve()
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    target = runs / cell.folder.name
    if target.exists():
        shutil.rmtree(target)
    ab_copies = [Path(shutil.copytree(run, target / run.relative_to(cell.folder))) for run in cell.runs]
    copies = {}
    for name in REFIT_RUNS:
        target = runs / name
        if target.exists():
            shutil.rmtree(target)
        copies[name] = Path(shutil.copytree(args.runs / name, target))
    from .folders import ab_report, refit_report

    eligible = sum(c.counts and c.engines == {"bridge"} for c in cells)
    elsewhere, note, system, scenario = cell_provenance(cell, ab_copies, eligible)
    rows = ab_report(ab_copies, out, warmup=4, name=f"{scenario} (recorded cell {cell.folder.name})",
                     system=f"{system} (recorded runs)", elsewhere=elsewhere,
                     elsewhere_source=f"the record's folder, {elsewhere['record']}", note=note)
    record = recorded_provenance(REFIT_RECORD)
    refit_report([copies[n] for n in REFIT_RUNS], out, "gpu_refit_nccl (recorded runs)", system=SYSTEM,
                 elsewhere=record, elsewhere_source=_source(REFIT_RECORD, record))
    print(_summary(rows, out, cell))
    return 0


def _source(path: Path, record: dict[str, str]) -> str | None:
    return f"{path.relative_to(ROOT)} (the device command's own record)" if record else None


def _summary(rows: list[dict[str, Any]], out: Path, cell: RecordedCell) -> str:
    lines = [f"A/B from {cell.folder.relative_to(ROOT)}:"]
    lines += [f"{r['cell']}: {r['arm']} vs {r['baseline']} {r['delta_pct']:+.1f} % [{r['delta_ci95_pct']}], "
              f"{r['verdict']} ({r.get('base_starts')} + {r.get('arm_starts')} starts, {r.get('interval_method')})"
              for r in rows if r.get("delta_pct") is not None]
    return "\n".join([*lines, f"wrote {out / 'mbridge_ab.html'} and {out / 'mbridge_refit.html'}"])


if __name__ == "__main__":
    sys.exit(main())
