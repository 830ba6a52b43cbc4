"""Upstream's verdict on refit layouts, for tests/rules/test_refit_differential.py: one gloo world judges every case
of a JSON list, and rank 0 prints one line ``ORACLE <json>`` with a verdict per case: {"accept": bool, "why": str,
"idle": [first, last] | null}. ``python refit_oracle.py --fork N --config cases.json`` imports once and forks the N
ranks; without --fork each process is one rank (RANK, WORLD_SIZE, MASTER_* from the environment, as torchrun).

What decides, in order, and where upstream does it:
1. Unset sizes, as Megatron-LM fills them: source tp, pp, ep = 1 and etp = tp (training/arguments.py:569-570);
   destination tp, pp, ep, etp = the source's (examples/rl/benchmark_refit.py "default to training parallelism";
   training/arguments.py --rl-inference-expert-tensor-model-parallel-size "Defaults to training
   expert_tensor_parallel_size"; core/inference/shards.py expt_tp_size None -> the training value). Written here
   again on purpose, not imported from cloudai_mbridge.
2. Ranks, as Megatron-LM's benchmark_refit.py places them: collocated, both sides on the whole world;
   non-collocated, each side tp*pp*ep ranks (or the case's explicit `world`), source first, then destination,
   refused when they do not fit ("Non-collocated mode requires at least ..."), the rest idle. (Its collocated
   "world // (tp*pp*ep) < 1" print-out check is not followed: with etp < tp it refuses grids megatron-core builds
   and refits, e.g. TP4 x EP4 x ETP1 on 4 ranks.)
3. The two grids of each side, with core/inference/shards.py's asserts (0.19.2 lines 70-81: world divisible by
   tp*cp*pp and by expt_tp*ep*pp), then built for real with HyperCommGrid (megatron-core 0.16.1).
4. The real models: megatron-core GPTModel on each side's groups (TransformerConfig and the modules assert what
   they cannot split). A rank outside a side passes a parameter-less module, as 0.16.1 needs (0.17+: None).
5. The real planner, megatron.core.resharding.planner.build_centralized_reshard_plan, with the payload's
   local-expert adapter installed (it names local-spec experts globally, as the planner already does for
   TEGroupedMLP's; without it EP layouts fail on a naming bug of the local spec, not on the layout). A plan must
   also cover every destination element exactly once.

Harness, not stand-in: identical process groups are created once and reused across cases (torch's new_group is
wrapped by a cache keyed on the rank list), so 40-odd cases need one world and a few hundred groups, not thousands.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta

IMPORTED = time.perf_counter()


def upstream_sides(case: dict) -> tuple[dict, dict]:
    src = {k: case["src"].get(k) for k in ("tp", "pp", "ep", "etp", "world")}
    dst = {k: case["dst"].get(k) for k in ("tp", "pp", "ep", "etp", "world")}
    for k in ("tp", "pp", "ep"):
        src[k] = 1 if src[k] is None else src[k]
    src["etp"] = src["tp"] if src["etp"] is None else src["etp"]
    for k in ("tp", "pp", "ep", "etp"):
        dst[k] = src[k] if dst[k] is None else dst[k]
    return src, dst


def placement(case: dict, src: dict, dst: dict) -> tuple[int, int, int, int]:
    """(src world, src first rank, dst world, dst first rank); ValueError as benchmark_refit.py raises it."""
    world = case["world_size"]
    if case["mode"] == "collocated":  # the grids' asserts (shards_asserts) decide what fits
        return world, 0, world, 0
    sw = src["world"] or src["tp"] * src["pp"] * src["ep"]
    dw = dst["world"] or dst["tp"] * dst["pp"] * dst["ep"]
    if world < sw + dw:
        raise ValueError(f"Non-collocated mode requires at least {sw + dw} GPUs")
    return sw, 0, dw, sw


def shards_asserts(side: dict, world: int) -> tuple[int, int]:
    """core/inference/shards.py build_inference_pg_collection (0.19.2 L70-81), cp = 1: (dp, expert dp)."""
    tp, pp, ep, etp = side["tp"], side["pp"], side["ep"], side["etp"]
    dp = world // (tp * pp)
    assert dp >= 1 and tp * dp * pp == world, f"World size ({world}) must be divisible by tp*cp*pp ({tp * pp})"
    edp = world // (etp * ep * pp)
    assert edp >= 1 and etp * ep * edp * pp == world, (
        f"World size ({world}) must be divisible by expt_tp*ep*pp ({etp * ep * pp})")
    return dp, edp


def _cache_groups() -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    made: dict[tuple[int, ...], object] = {}
    real = c10d.new_group

    def new_group(ranks=None, *args, **kwargs):
        key = tuple(ranks) if ranks is not None else ("world",)
        if key not in made:
            made[key] = real(ranks, *args, **kwargs)
        return made[key]

    c10d.new_group = new_group
    dist.new_group = new_group


def _gather(value) -> list:
    import torch.distributed as dist

    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _covered(plan, dst_model) -> str:
    """'' when every element of this rank's destination parameters is received exactly once."""
    import torch

    for name, param in dst_model.named_parameters():
        count = torch.zeros(param.shape, dtype=torch.int32)
        for op in plan.recv_ops:
            if op.param_name == name:
                count[op.my_slice] += 1
        if not bool((count == 1).all()):
            return f"plan covers {name} {int(count.min())}..{int(count.max())} times"
    return ""


def judge(case: dict, rank: int) -> dict:
    from megatron.core.resharding.planner import build_centralized_reshard_plan

    from cloudai_mbridge.payload.refit.config import SideLayout, from_dict
    from cloudai_mbridge.payload.refit.groups import build_pg_collection
    from cloudai_mbridge.payload.refit.models import absent_side, build_model

    src, dst = upstream_sides(case)
    try:  # pure and identical on every rank: no collective has started
        sw, so, dw, do = placement(case, src, dst)
        (sdp, _), (ddp, _) = shards_asserts(src, sw), shards_asserts(dst, dw)
    except (AssertionError, ValueError) as exc:
        return {"accept": False, "why": str(exc), "idle": None}
    layouts = [SideLayout(n, s["tp"], s["pp"], s["ep"], s["etp"], dp, off)
               for n, s, dp, off in (("src", src, sdp, so), ("dst", dst, ddp, do))]
    pgs = [build_pg_collection(side) for side in layouts]  # collective: every rank, every group
    # the payload's model builder, fed the upstream sizes written out (nothing left for it to fill)
    cfg = from_dict({"model": case["model"], "mode": case["mode"], "device": "cpu", "transport": "gloo",
                     "dtype": "fp32", "src": {k: src[k] for k in ("tp", "pp", "ep", "etp")},
                     "dst": {k: dst[k] for k in ("tp", "pp", "ep", "etp")}})
    models, error = [], ""
    for side, pg in zip(layouts, pgs, strict=True):
        try:
            models.append(build_model(cfg, side, pg) if pg is not None else absent_side(cfg, side))
        except Exception as exc:  # megatron asserts (AssertionError, ValueError, ...)
            models.append(None)
            error = error or f"{type(exc).__name__}: {exc}"
    errors = [e for e in _gather(error) if e]
    if errors:
        return {"accept": False, "why": "build: " + errors[0], "idle": None}
    import torch.distributed as dist

    try:
        plan = build_centralized_reshard_plan(models[0], models[1], num_experts=case["model"]["num_experts"])
        error = _covered(plan, models[1])
    except Exception as exc:  # the planner's RuntimeError, or the release below
        if rank == 0:  # 0.16.1 raises on rank 0 only; release the others from their broadcast
            dist.broadcast_object_list([None] * dist.get_world_size(), src=0)
        error = f"{type(exc).__name__}: {exc}"
    reasons = _gather(error)
    used = max(so + sw, do + dw)
    idle = [used, case["world_size"] - 1] if case["world_size"] > used else None
    first = reasons[0] or next((r for r in reasons if r), "")  # rank 0 holds the planner's own words
    return {"accept": not first, "why": "plan: " + first if first else "", "idle": idle}


def main() -> int:
    import torch.distributed as dist

    from cloudai_mbridge.payload.refit.adapter import install_local_expert_fix

    path = sys.argv[sys.argv.index("--config") + 1]
    with open(path, encoding="utf-8") as fh:
        cases = json.load(fh)["cases"]
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=timedelta(seconds=120))
    assert max(c["world_size"] for c in cases) <= dist.get_world_size()
    _cache_groups()
    install_local_expert_fix()
    verdicts = []
    started = time.perf_counter()
    for case in cases:
        try:
            verdicts.append(judge(case, rank))
        except Exception:  # a harness failure, not a verdict: say so loudly
            traceback.print_exc()
            return 3
    if rank == 0:
        print(f"[oracle] {len(cases)} cases in {time.perf_counter() - started:.1f} s after {started - IMPORTED:.1f} s "
              "of start-up", file=sys.stderr, flush=True)
        print("ORACLE " + json.dumps(verdicts), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def forked(world: int) -> int:
    """Import torch and megatron-core once, then fork the `world` ranks: a rank's start-up is a fork, not a fresh
    interpreter importing megatron (8 of those took 128 s on a loaded 2-core box, the 51 cases 20 s)."""
    import socket

    import megatron.core.resharding.planner  # noqa: F401 - imported before the fork, on purpose

    import cloudai_mbridge.payload.refit.models  # noqa: F401

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    pids = []
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            code = 3
            try:
                code = main()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    return next((c for c in codes if c), 0)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "--fork" in sys.argv:
        sys.exit(forked(int(sys.argv[sys.argv.index("--fork") + 1])))
    sys.exit(main())
