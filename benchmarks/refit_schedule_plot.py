"""Plot the refit schedule comparison of one host: median refit time per (coalesce MiB, schedule) with the min..max
of the timed refits, and the times the same command's 4 GiB exchange ceiling allows at 100 % and 80 %.

usage: python3 benchmarks/refit_schedule_plot.py <out.png> <gpu_refit_nccl.json>...
Reads the ``refit`` rows of each JSON (benchmarks/gpu_refit_nccl.py), one group of bars per JSON; rows are compared
only within a device command. A JSON written with --skip-p2p has no ceiling: name it right after the JSON of the same
command that measured one, and its rows use that ceiling. Prints one line per row and
``RESULT refit_best_pct_of_p2p=<x> %`` (the best row's share of its own command's ceiling).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    found = []
    for r in data.get("refit", []):
        if r.get("status", "ok") != "ok" and r.get("error"):
            continue
        if r.get("median_ms") is None or r.get("verify", "pass") not in ("pass", None):
            continue
        found.append(r)
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(argv[0])
    fig, ax = plt.subplots(figsize=(11, 4.8))
    x = 0.0
    ticks, labels, pairs = [], [], []
    best = None
    last_ceiling = None
    for name in argv[1:]:
        group = rows(Path(name))
        for r in group:
            ceiling = (r.get("ceiling") or last_ceiling or {}).get("gbps_per_gpu")
            if ceiling is None:
                print(f"{name}: {r['name']}: no ceiling in this JSON or the one before it; skipped")
                continue
            last_ceiling = r.get("ceiling") or last_ceiling
            sched = r.get("coalesce_schedule", "rounds") + (" profiled" if r.get("phases") else "")
            edge = f"edges {r['coalesce_edge_mib']} MiB" if r.get("coalesce_edge_mib") else ""
            pairs.append(str(r.get("pair", "")).replace("-", " -> ").upper())
            med, lo, hi = r["median_ms"], r["min_ms"], r["max_ms"]
            # the row's own per-GPU rate (gpu_refit_nccl.py divides by the run's world, whatever the layouts), so
            # a row written without a ceiling gets the share the JSON would have written with it
            pct = r["remote_gbps_per_gpu"] / ceiling * 100
            color = "tab:orange" if sched.startswith("pairwise") else "tab:blue"
            ax.bar(x, med, width=0.8, color=color, yerr=[[med - lo], [hi - med]], capsize=3)
            ax.text(x, hi + 0.4, f"{pct:.1f}%", ha="center", fontsize=8)
            ticks.append(x)
            labels.append("\n".join(filter(None, (Path(name).parent.name, f"{r['coalesce_mib']} MiB", sched, edge))))
            print(f"{Path(name).parent.name}: {r['name']} {' '.join(filter(None, (sched, edge)))} "
                  f"{r['coalesce_mib']} MiB median {med:.2f} ms "
                  f"[{lo:.2f}..{hi:.2f}] {pct:.1f} % of {ceiling:.1f} GB/s per GPU")
            if best is None or pct > best[0]:
                best = (pct, r["name"])
            full = med * pct / 100  # the same bytes at the ceiling
            if full:
                ax.plot([x - 0.45, x + 0.45], [full, full], color="black", lw=1)
                ax.plot([x - 0.45, x + 0.45], [full / 0.8, full / 0.8], color="black", lw=1, ls="--")
            x += 1
        x += 0.6
    ax.set_xticks(ticks, labels, fontsize=7)
    ax.set_ylabel("refit time, median of 8 timed refits (ms)")
    ax.set_title(f"Refit {', '.join(dict.fromkeys(pairs))}, replay executor: all-peer rounds (blue) vs pairwise "
                 "(orange)\nsolid line: the same command's 4 GiB exchange ceiling (100 %); dashed: 80 % of it; bars: "
                 "min..max", fontsize=9)
    ax.set_ylim(0, None)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    if best:
        print(f"RESULT refit_best_pct_of_p2p={best[0]:.1f} % ({best[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
