"""Time the training rules (memory estimate included) over a 1,000-point Kimi-K2 sweep, as a dry-run checks them.

Method: build 1,000 distinct TrainingPlans (a seeded sample of tp x pp x vp x ep x mbs x gbs x overlap x dispatcher
x recompute x num_nodes on B300 / EFA), then time one pass of ``TRAINING_RULES.check`` over all of them with
``time.perf_counter``. Every repetition starts from empty layout / schedule caches, as a fresh ``cloudai dry-run``
process does, and the caches warm up across the sweep the same way. Reported: the median of the repetitions per
point (the RESULT), with min, max and standard deviation, and the cost of building the plans, which is not part of
the rules.

Run: ``python3 benchmarks/rules_sweep.py [--points N] [--repeats R]``
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections import Counter

from cloudai_mbridge.catalog import get_gpu, get_model
from cloudai_mbridge.plan import TrainingPlan, layout, memory
from cloudai_mbridge.rules import TRAINING_RULES

AXES = {
    "tp": [1, 2, 4, 8],
    "pp": [1, 2, 4, 8, 16],
    "vp": [None, 2, 4],
    "ep": [8, 16, 32, 64],
    "mbs": [1, 2, 4],
    "gbs": [256, 512, 1000],
    "moe_a2a_overlap": [False, True],
    "dispatcher": ["alltoall", "deepep", "hybridep"],
    "recompute": ["none", "selective", "full"],
    "num_nodes": [16, 32, 64],
}


def build_sweep(points: int, seed: int = 3) -> list[TrainingPlan]:
    combos = list(itertools.product(*AXES.values()))
    random.Random(seed).shuffle(combos)
    kimi, b300 = get_model("kimi_k2"), get_gpu("b300")
    plans = []
    for combo in combos[:points]:
        values = dict(zip(AXES, combo, strict=True))
        impl = "uccl" if values["dispatcher"] == "deepep" else "nvidia"  # HybridEP needs NVIDIA's deep_ep
        plans.append(TrainingPlan(model=kimi, gpu=b300, gpus_per_node=8, network="efa", deepep_impl=impl,
                                  seq_length=4096, **values))
    return plans


def clear_caches() -> None:
    for fn in (layout.resolve_layout, layout.recipe_stages, memory._stage_counts, memory.in_flight_chunks):
        fn.cache_clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    t0 = time.perf_counter()
    plans = build_sweep(args.points)
    build_ms = (time.perf_counter() - t0) * 1e3

    verdicts: Counter[str] = Counter()
    accepted = 0
    per_pass_ms = []
    for rep in range(args.repeats):
        clear_caches()
        t0 = time.perf_counter()
        results = [TRAINING_RULES.check(p) for p in plans]
        per_pass_ms.append((time.perf_counter() - t0) * 1e3)
        if rep == 0:
            accepted = sum(not r for r in results)
            for r in results:
                verdicts.update({v.rule for v in r})

    per_point = [ms / len(plans) for ms in per_pass_ms]
    median = statistics.median(per_point)
    print(f"sweep: {len(plans)} Kimi-K2 points on 256-1024 x B300 (axes: {', '.join(AXES)}), "
          f"{len(TRAINING_RULES.rules)} rules incl. memory")
    print(f"method: time.perf_counter around one TRAINING_RULES.check pass over all points, {args.repeats} "
          "repetitions, layout/schedule caches cleared before each")
    print(f"verdicts: {accepted} accepted, {len(plans) - accepted} rejected; rejections by rule: "
          + ", ".join(f"{k} {n}" for k, n in verdicts.most_common()))
    print(f"building the plans (not timed as rules): {build_ms:.1f} ms")
    print("per pass (ms): " + ", ".join(f"{ms:.1f}" for ms in per_pass_ms))
    print(f"per point (ms): median {median:.4f}, min {min(per_point):.4f}, max {max(per_point):.4f}, "
          f"stdev {statistics.stdev(per_point) if len(per_point) > 1 else 0.0:.4f}")
    print(f"RESULT ms_per_point={median:.4f} ms")


if __name__ == "__main__":
    main()
