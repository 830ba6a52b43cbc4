"""How often the A/B's "same work" gate rejects the baseline against itself, on the recorded 4 x H100 cells.

Method. For every recorded cell (a folder of run folders, ``runs/<point>_<arm>[_s<k>]``) with at least three
baseline (alltoall) starts: leave one baseline start out; the other two are the baseline; the held-out start, and then
each flex-arm start on its own, is judged by the report's gate (``reports/ab_starts.loss_envelope``: the lm loss
inside the baseline starts' widened envelope up to their reproducible horizon, rtol 1e-3 as in reports/ab.py).
A held-out baseline start is the same configuration, so every rejection of it is a false alarm of the gate. Each
start is judged alone, so the two rates compare like with like. Also: the largest relative loss difference between
any two starts of a cell (both arms) over the first iterations, where the weights are still the same (iteration 1 is
the forward pass of identical weights on identical data).

The judgements are also split by the cell's learning-rate schedule (``lr`` in the runs' mbridge_config.json: absent =
the recipe's warm-up schedule, else a constant lr): an unstable run amplifies rounding differences between dispatchers,
a stable one does not, and the gate means something different in each. Per schedule, also the largest relative loss
difference between any two starts at the last iteration every start has.

Units: % of leave-one-out judgements; relative loss difference (dimensionless). Reads rank logs and each run's
mbridge_config.json; a run folder whose log does not parse whole is left out and named.

usage: python3 benchmarks/ab_work_gate.py [cell folders...]   (default: benchmarks/results/bridge_ab_4gpu/*/)
Prints one line per cell and judgement, then ``RESULT`` lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cloudai_mbridge.metrics import parse_training_run
from cloudai_mbridge.reports import ab_starts

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "benchmarks" / "results" / "bridge_ab_4gpu"
BASELINE = "alltoall"
RTOL = 1e-3  # reports/ab.py ABConfig.loss_rtol's default
EARLY = 3  # iterations compared for the same-weights check


def schedule_of(config: dict | None) -> str:
    """"recipe" (the recipe's warm-up schedule) or "lr_<value>" (a constant learning rate; 1e-05 written 1em05, so
    that the RESULT metric stays a word), from a run's config."""
    lr = (config or {}).get("lr")
    return "recipe" if lr is None else "lr_" + f"{float(lr):g}".replace("-", "m").replace(".", "p")


def lr_text(sched: str) -> str:
    """1e-05 from "lr_1em05"."""
    return sched.removeprefix("lr_").replace("m", "-").replace("p", ".")


def cell_curves(cell: Path) -> tuple[dict[str, dict[str, dict[int, float]]], list[str], set[str]]:
    """{arm: {run name: loss curve}} of a cell's run folders, the folders left out (with why), and the learning-rate
    schedules its runs recorded (one, in a cell the A/B report would pair)."""
    arms: dict[str, dict[str, dict[int, float]]] = {}
    skipped = []
    schedules: set[str] = set()
    for run in sorted(p for p in (cell / "runs").iterdir() if p.is_dir()):
        m = parse_training_run(run, warmup=4)
        arm = (m.config or {}).get("dispatcher")  # the arm as the A/B report pairs it (reports/ab.py, pair field)
        if m.status != "ok" or not m.loss_curve or not isinstance(arm, str):
            skipped.append(f"{run.name} ({m.status if arm else 'no dispatcher in mbridge_config.json'})")
            continue
        arms.setdefault(arm, {})[run.name] = m.loss_curve
        schedules.add(schedule_of(m.config))
    return arms, skipped, schedules


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="*", type=Path)
    args = ap.parse_args(argv)
    cells = args.cells or sorted(p for p in DEFAULT.iterdir() if (p / "runs").is_dir())
    held = {"pass": 0, "fail": 0, "unknown": 0}
    arm_j: dict[str, dict[str, int]] = {}
    by_sched: dict[str, dict[str, dict[str, int]]] = {}  # schedule -> arm (baseline: held-out) -> states
    late_worst: dict[str, float] = {}
    early_worst = 0.0
    used = 0
    for cell in cells:
        if not (cell / "runs").is_dir():
            print(f"error: {cell}: no runs/ folder (a cell folder holds runs/<point>_<arm>[_s<k>]/)", file=sys.stderr)
            return 2
        arms, skipped, schedules = cell_curves(cell)
        for s in skipped:
            print(f"{cell.name}: left out {s}")
        if len(schedules) > 1:
            print(f"error: {cell}: runs with different learning-rate schedules ({', '.join(sorted(schedules))}); "
                  "a cell holds one configuration", file=sys.stderr)
            return 2
        sched = next(iter(schedules), "recipe")
        base = arms.get(BASELINE, {})
        if len(base) < 3:
            print(f"{cell.name}: {len(base)} baseline start(s): needs 3 for leave-one-out, skipped")
            continue
        used += 1
        curves = [c for a in arms.values() for c in a.values()]
        for it in range(1, EARLY + 1):
            vals = [c[it] for c in curves if it in c]
            if len(vals) == len(curves):
                early_worst = max(early_worst, (max(vals) - min(vals)) / abs(min(vals)))
        common = set.intersection(*(set(c) for c in curves))
        if common:
            vals = [c[max(common)] for c in curves]
            late_worst[sched] = max(late_worst.get(sched, 0.0), (max(vals) - min(vals)) / abs(min(vals)))
        mine = by_sched.setdefault(sched, {})
        for out in sorted(base):
            rest = [c for n, c in base.items() if n != out]
            g = ab_starts.loss_envelope(rest, [base[out]], RTOL)
            held[g.state] += 1
            mine.setdefault(BASELINE, {"pass": 0, "fail": 0, "unknown": 0})[g.state] += 1
            print(f"{cell.name}: baseline without {out}: held-out {BASELINE} {g.state}: {g.detail}")
            for arm, runs in sorted(arms.items()):
                if arm == BASELINE:
                    continue
                for name, curve in sorted(runs.items()):
                    g = ab_starts.loss_envelope(rest, [curve], RTOL)
                    arm_j.setdefault(arm, {"pass": 0, "fail": 0, "unknown": 0})[g.state] += 1
                    mine.setdefault(arm, {"pass": 0, "fail": 0, "unknown": 0})[g.state] += 1
                    print(f"{cell.name}: baseline without {out}: {name} {g.state}: {g.detail}")

    def pct(d: dict[str, int]) -> float:
        judged = d["pass"] + d["fail"]
        return 100.0 * d["fail"] / judged if judged else float("nan")

    print(f"RESULT ab_work_gate_cells={used} count (cells with >= 3 baseline starts)")
    print(f"RESULT ab_work_gate_baseline_rejected_pct={pct(held):.1f} % "
          f"({held['fail']} of {held['pass'] + held['fail']} held-out {BASELINE} starts; false alarms)")
    for arm, d in sorted(arm_j.items()):
        print(f"RESULT ab_work_gate_{arm}_rejected_pct={pct(d):.1f} % "
              f"({d['fail']} of {d['pass'] + d['fail']} {arm} starts, each alone)")
    print(f"RESULT ab_early_loss_max_rel_diff={early_worst:.2e} (iterations 1-{EARLY}, every start of both arms)")
    for sched, arms_d in sorted(by_sched.items()):
        what = "the recipe's warm-up schedule" if sched == "recipe" else f"constant lr {lr_text(sched)}"
        for arm, d in sorted(arms_d.items()):
            who = f"held-out {BASELINE} starts; false alarms" if arm == BASELINE else f"{arm} starts, each alone"
            print(f"RESULT ab_work_gate_{arm}_rejected_pct_{sched}={pct(d):.1f} % "
                  f"({d['fail']} of {d['pass'] + d['fail']} {who}; {what})")
        print(f"RESULT ab_last_loss_max_rel_diff_{sched}={late_worst.get(sched, float('nan')):.2e} "
              f"(the last iteration every start has, any two starts of a cell, both arms; {what})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
