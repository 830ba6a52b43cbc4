"""Which recorded dispatcher A/B cells count: >= 3 process starts per arm, the same routing in every run, the loss
inside the baseline's envelope (the report's work gate), and a verdict the report gave (faster / slower / within noise).

Method. Reads each cell folder's ``mbridge_ab.csv`` (written by ``gpu_dispatcher_ab.py --report <cell>``, one host per
folder) and the baseline run's ``mbridge_config.json`` for the model and micro-batch size. A cell that fails any
condition is listed with the first reason. Cells of different hosts are never pooled: a (model, mbs, ep, arm) counted on
several hosts is one cell here, listed with each host's folder.

usage: python3 benchmarks/ab_cells.py [cell folders...]   (default: benchmarks/results/bridge_ab_4gpu/*/)
Prints one line per A/B row, then ``RESULT ab_bridge_cells=<n> count``: distinct (model, mbs, ep, arm) cells that count.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "benchmarks" / "results" / "bridge_ab_4gpu"
MIN_STARTS = 3
VERDICTS = ("faster", "slower", "within noise")


def _int(text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return 0


def why_not(row: dict[str, str]) -> str | None:
    """None when the row counts, else the first reason it does not."""
    base, arm = _int(row.get("base_starts", "")), _int(row.get("arm_starts", ""))
    verdict = row.get("verdict", "")
    if verdict.startswith("invalid"):  # a start that failed: the report compared nothing, whatever else it says
        return f"verdict: {verdict if len(verdict) <= 240 else verdict[:240] + ' ...'}"
    if min(base, arm) < MIN_STARTS:
        return f"{base} + {arm} starts (needs >= {MIN_STARTS} per arm)"
    if not row.get("routing", "").startswith("same routing"):
        return f"routing: {row.get('routing', '') or 'not recorded'}"
    if not row.get("work", "").startswith("lm loss inside"):
        return f"work gate: {row.get('work', '') or 'not recorded'}"
    if not any(verdict.endswith(v) for v in VERDICTS):
        return f"verdict: {verdict or 'none'}"
    return None


def cell_key(row: dict[str, str]) -> tuple[str, int, int] | None:
    """(model, mbs, ep) from the baseline run's recorded config, else the arm run's (both arms of a cell run the same
    model, mbs and ep; a record may keep only the run that failed); None when neither can be read. ep is part of the
    cell: the same model and mbs on 2 and on 4 GPUs are two cells."""
    for key in ("base_run", "arm_run"):
        path = Path(row.get(key, ""))
        path = path if path.is_absolute() else ROOT / path
        try:
            cfg = json.loads((path / "mbridge_config.json").read_text())
            return str(cfg["model"]["name"]), int(cfg["mbs"]), int(cfg.get("ep") or 1)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="*", type=Path)
    args = ap.parse_args(argv)
    cells = args.cells or sorted(p for p in DEFAULT.iterdir() if (p / "mbridge_ab.csv").is_file())
    counted: dict[tuple[str, int, int, str], list[str]] = {}
    for cell in cells:
        table = cell / "mbridge_ab.csv"
        if not table.is_file():
            print(f"error: {cell}: no mbridge_ab.csv (run `python3 benchmarks/gpu_dispatcher_ab.py --report {cell}` "
                  "first)", file=sys.stderr)
            return 2
        with table.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:
            if not row.get("arm"):
                why = row.get("verdict") or "no arm"
                print(f"{cell.name}: {row.get('baseline', '?')} alone: does not count: {why}")
                continue
            key = cell_key(row)
            reason = why_not(row) if key else "the baseline run's mbridge_config.json cannot be read"
            arm = row.get("arm", "?")
            what = f"{key[0]} mbs {key[1]} ep {key[2]} {arm}" if key else arm
            if reason:
                print(f"{cell.name}: {what}: does not count: {reason}")
                continue
            print(f"{cell.name}: {what}: counts: {row['verdict']}, {float(row['delta_pct']):+.1f} % "
                  f"[{row.get('delta_ci95_pct', '')}], {row['base_starts']} + {row['arm_starts']} starts")
            counted.setdefault((key[0], key[1], key[2], arm), []).append(cell.name)
    for (model, mbs, ep, arm), where in sorted(counted.items()):
        print(f"cell {model} mbs {mbs} ep {ep} {arm}: {', '.join(where)}")
    print(f"RESULT ab_bridge_cells={len(counted)} count (distinct model x mbs x ep x arm with >= {MIN_STARTS} starts "
          "per arm and both gates passed, each on one host)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
