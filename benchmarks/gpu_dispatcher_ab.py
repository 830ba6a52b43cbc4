"""MoE token-dispatcher A/B on one node: alltoall against flex/DeepEP (UCCL-EP's drop-in ``deep_ep`` where it is the
one that imports) and, with ``--with-hybridep``, flex/HybridEP, over mbs x a2a overlap, as one command.

Method. 1. Probe: a child process with the environment the payload processes get (``--uccl-dir`` adds to it, see
``uccl_env``) imports ``uccl`` / ``uccl.ep`` and ``deep_ep`` the way the payload does (payload/train_log.py
``import_deep_ep``, ``deep_ep_provider``) and asks megatron-core's fused_a2a whether it sees DeepEP / HybridEP; every
exception is recorded verbatim (ImportError text, missing symbol, OSError of a .so, or the signal that killed it).
With ``--hybridep-dir`` the hybridep arm gets an environment of its own (NVIDIA DeepEP's hybrid-ep build first on
PYTHONPATH, no UCCL path, CUDA_HOME and HYBRID_EP_CACHE_DIR; ``hybridep_env``) and plans with deepep_impl "nvidia";
the probe runs once per distinct environment and speaks for the arms that have it.
2. Grid: arm (dispatcher) x mbs {1, 4} x overlap (``TrainingPlan.moe_a2a_overlap``, Megatron's
overlap_moe_expert_parallel_comm) {off, on}. Each point is a TrainingPlan from the catalog (model ``--model``, GPU from
torch or ``--gpu``, one node of ``--gpus`` GPUs, tp = pp = cp = etp = 1, ep = gpus, gbs = mbs x dp x
``--microbatches``, seq ``--seq``, bf16, no recompute, balanced routing forced, distributed optimizer, Adam) checked
by the project's rule set (rules/training.py TRAINING_RULES) and by the payload's own list of what the "mcore" engine
cannot do (payload/train_config.py mcore_unsupported, reported as rule ``mcore-engine`` as the CloudAI test
definition does). Rejected points are skipped and printed with the rule id and its message. An arm is blocked as a
whole when the probe says its deep_ep cannot serve it. 3. Runs: ``launch/training.py training_config(...)`` writes
the payload JSON (engine "mcore", mock data, seed ``--seed`` for every arm, so both arms see the same tokens and the
same initial weights; ``--lr`` a constant learning rate with no warmup in every arm, recorded as the
config's ``lr``); the payload runs one process per GPU (``payload/refit_local.launch``, module
``cloudai_mbridge.payload.train``) for ``--iters`` iterations, the arms of one point back to back; each run is a run
folder ``<out>/runs/<point>_<arm>/mbridge_config.json`` + ``logs/rank-<R>.log``. 4. Metrics: each folder is read
back with ``cloudai_mbridge.metrics.parse_training_run`` (steady state: the first ``--warmup`` iterations dropped;
median, p10-p90 and min-max of the per-iteration time; TFLOP/s/GPU and tokens/s medians; the deep_ep the payload
imported, from its MBRIDGE_DEEP_EP line). 5. A/B: the run folders go through the ``mbridge_ab`` scenario report
(reports/ab.py MBridgeABReport: pairs runs whose configs differ only in the dispatcher, delta of the steady-state
MEAN iteration time (arm - alltoall) / alltoall x 100, validity gates, equal work from the loss curves, winner), run
here on real CloudAI objects (``ab_report``); it writes mbridge_ab.csv / .html / *.png into ``<out>``. Where CloudAI
is not importable (the bare GPU image) the A/B step says so and ``--report <out>`` redoes steps 4-5 later on any
host with CloudAI (e.g. on the folder unpacked from ab_runs.tgz).

Run (GPU host, megatron-core importable):
    python3 benchmarks/gpu_dispatcher_ab.py --out /tmp/ab [--gpus N] [--model deepseek_v3_proxy] [--iters 8]
        [--with-hybridep [--hybridep-dir /tmp/mbridge_stack/hybridep/site]] [--uccl-dir .whl/uccl] [--budget-s S]
    python3 benchmarks/gpu_dispatcher_ab.py --dry-run [--gpus N]      grid, rule verdicts, payload configs; no GPU
    python3 benchmarks/gpu_dispatcher_ab.py --report /tmp/ab [--warmup 4]  metrics + A/B of existing run folders
Prints a table and ``RESULT`` lines; writes ``<out>/gpu_dispatcher_ab.json`` (with provenance.py's provenance).
Exit status: 0 when at least one point ran and no run crashed unexpectedly; 1 when nothing ran or an alltoall run
(the baseline) failed, or a flex run failed with no identifiable reason; 2 for a usage/host problem (a host without a
CUDA GPU, with fewer than ``--gpus``, or without megatron-core gets one line and 2 before anything is written;
``--dry-run`` and ``--report`` need neither). A flex arm that
fails with a reason (dispatcher error, deep_ep import, CUDA/DeepEP kernel failure) is reported as "cannot
run here" with that reason; its remaining points are then skipped unless ``--keep-going``. A start that hangs is a
failed start of its arm and the remaining starts run: the payload's watchdog (``--hang-timeout-s``, default 120 s
without progress) ends it with its stacks and ``MBRIDGE_HANG class=<init|first_dispatch|later>`` in the rank logs;
past ``--timeout-s`` the launcher asks the ranks for their stacks (SIGUSR1) and kills their process groups. Its
reason says where it stood: "hang at first dispatch", "hang after iteration N".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from provenance import provenance, require_gpu  # benchmarks/ is sys.path[0] when a script runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudai_mbridge.catalog import GPUS, get_gpu, get_model  # noqa: E402
from cloudai_mbridge.catalog.gpus import gpu_for_device_name  # noqa: E402
from cloudai_mbridge.launch.training import training_config  # noqa: E402
from cloudai_mbridge.plan import TrainingPlan  # noqa: E402
from cloudai_mbridge.rules import TRAINING_RULES  # noqa: E402

BASELINE = "alltoall"
FLEX_ARMS = ("deepep", "hybridep", "ncclep")
DEEP_EP_ARMS = ("deepep", "hybridep")  # the arms that import deep_ep (the probe speaks for them)
MBS_DEFAULT = (1, 4)
OVERLAPS = (False, True)
# NVLink multicast (NVLS) stays off in every process we start, as in every recorded run, unless the caller set these.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# megatron-core 0.17.1 token_dispatcher.py (~L1365, MoEFlexTokenDispatcher.__init__); 0.16.1 has it at L1346.
FLEX_ASSERT = "megatron-core's MoEFlexTokenDispatcher asserts 'DeepEP dispatcher requires TPxEP > 1'"
CUDART = "libcudart.so.12"
# The payload watchdog's limit in these runs: the longest time a healthy bridge-engine start spent outside its
# iterations (imports, init, model build, first-iteration compiles; benchmarks/results) was 96 s, on 4 x H100.
HANG_TIMEOUT_S = 120


# --------------------------------------------------------------------------------------------------------------
# Environment of the child processes (probe and payload)
# --------------------------------------------------------------------------------------------------------------


def _split(value: str | None) -> list[str]:
    return [p for p in (value or "").split(os.pathsep) if p]


def find_cudart(entries: list[str]) -> Path | None:
    """The folder holding libcudart.so.12 of the nvidia-cuda-runtime-cu12 wheel (nvidia/cuda_runtime/lib) under the
    first import-path entry that has one."""
    for entry in entries:
        lib = Path(entry) / "nvidia" / "cuda_runtime" / "lib"
        if (lib / CUDART).exists():
            return lib.resolve()
    return None


def uccl_env(uccl_dir: Path, base: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """PYTHONPATH and LD_LIBRARY_PATH for UCCL-EP's drop-in deep_ep, as full values (the launch helper lays
    ``env`` over os.environ key by key, so a value given here replaces the inherited one).

    Nothing is installed here: the caller pip-installed the uccl and nvidia-cuda-runtime-cu12 wheels into a folder
    on PYTHONPATH. Added in front: ``<uccl-dir>`` (parent of deep_ep/) to PYTHONPATH; ``<uccl-dir>/lib``
    (libibverbs.so.1, libnl-*) and the folder holding libcudart.so.12 (found under the PYTHONPATH entries, then
    sys.path) to LD_LIBRARY_PATH. Returns (variables, notes on what was not found).
    """
    uccl_dir = uccl_dir.resolve()
    notes = []
    if not (uccl_dir / "deep_ep" / "__init__.py").is_file():
        notes.append(f"{uccl_dir}/deep_ep/__init__.py not found (UCCL's drop-in deep_ep package)")
    pythonpath = [str(uccl_dir), *[p for p in _split(base.get("PYTHONPATH")) if p != str(uccl_dir)]]
    libs = []
    if (uccl_dir / "lib").is_dir():
        libs.append(str(uccl_dir / "lib"))
    else:
        notes.append(f"{uccl_dir}/lib not found (libibverbs.so.1 for uccl/ep.abi3.so)")
    cudart = find_cudart(_split(base.get("PYTHONPATH"))) or find_cudart([p for p in sys.path if p])
    if cudart is None:
        notes.append(f"no nvidia/cuda_runtime/lib/{CUDART} under PYTHONPATH or sys.path (pip-install the "
                     "nvidia-cuda-runtime-cu12 wheel into a folder on PYTHONPATH)")
    else:
        libs.append(str(cudart))
    ld = [*libs, *[p for p in _split(base.get("LD_LIBRARY_PATH")) if p not in libs]]
    return {"PYTHONPATH": os.pathsep.join(pythonpath), "LD_LIBRARY_PATH": os.pathsep.join(ld)}, notes


def uccl_site(entry: Path) -> bool:
    """A PYTHONPATH folder holding UCCL's pip install (uccl/__init__.py) or the CUDA 12 runtime it brings
    (nvidia/cuda_runtime/lib/libcudart.so.12): gpu_bridge_env.sh puts /tmp/uccl_site on every arm's PYTHONPATH, and
    on 4 x H200 (2026-11-28) the hybridep arm then ran with libcudart.so.12 and .so.13 both loaded (cuDNN
    frontend: "Multiple libcudart libraries found ... Using libcudart.so.12")."""
    return (entry / "uccl" / "__init__.py").is_file() or find_cudart([str(entry)]) is not None


def hybridep_env(hybridep_dir: Path, base: Mapping[str, str],
                 uccl_dir: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """PYTHONPATH, CUDA_HOME and HYBRID_EP_CACHE_DIR for NVIDIA DeepEP's hybrid-ep build (deep_ep.HybridEPBuffer),
    installed into ``hybridep_dir`` by benchmarks/gpu_hybridep_build.sh (/tmp/mbridge_stack/hybridep/site; the same
    variables as its env.sh). ``hybridep_dir`` goes first on PYTHONPATH and ``uccl_dir`` (UCCL's drop-in deep_ep,
    which would shadow it) is left out; LD_LIBRARY_PATH is not touched (UCCL's libraries are added by ``uccl_env``
    only). CUDA_HOME: the inherited one, else /usr/local/cuda (HybridEP JIT-compiles with $CUDA_HOME/bin/nvcc at
    its first dispatch); HYBRID_EP_CACHE_DIR: the inherited one, else /tmp/hybridep_jit. Returns (variables, notes)."""
    hybridep_dir = hybridep_dir.resolve()
    notes = []
    if not (hybridep_dir / "deep_ep" / "__init__.py").is_file():
        notes.append(f"{hybridep_dir}/deep_ep/__init__.py not found (NVIDIA DeepEP's hybrid-ep build, made by "
                     "benchmarks/gpu_hybridep_build.sh)")
    drop = {str(hybridep_dir), *([str(uccl_dir.resolve())] if uccl_dir is not None else [])}
    kept = []
    for entry in _split(base.get("PYTHONPATH")):
        if entry in drop:
            continue
        if uccl_site(Path(entry)):
            notes.append(f"{entry} left off PYTHONPATH (UCCL's pip site: its uccl package or libcudart.so.12 "
                         "would load a second CUDA runtime into the hybridep arm)")
            continue
        kept.append(entry)
    pythonpath = [str(hybridep_dir), *kept]
    cuda_home = base.get("CUDA_HOME") or "/usr/local/cuda"
    if not (Path(cuda_home) / "bin" / "nvcc").exists():
        notes.append(f"{cuda_home}/bin/nvcc not found (HybridEP's run-time JIT needs it; set CUDA_HOME)")
    return {"PYTHONPATH": os.pathsep.join(pythonpath), "CUDA_HOME": cuda_home,
            "HYBRID_EP_CACHE_DIR": base.get("HYBRID_EP_CACHE_DIR") or "/tmp/hybridep_jit"}, notes


def uses_hybridep_dir(args: argparse.Namespace, arm: str | None) -> bool:
    return arm == "hybridep" and getattr(args, "hybridep_dir", None) is not None


def arm_deepep_impl(args: argparse.Namespace, arm: str) -> str:
    """The deepep_impl of an arm's plans: "nvidia" for the hybridep arm with --hybridep-dir (its deep_ep is NVIDIA
    DeepEP's hybrid-ep build, so rule hybridep-uccl holds), --deepep-impl for every other arm."""
    return "nvidia" if uses_hybridep_dir(args, arm) else args.deepep_impl


def child_env(args: argparse.Namespace, arm: str | None = None) -> tuple[dict[str, str], list[str]]:
    """What the child processes of ``arm`` get on top of os.environ (probe and payload alike): with --hybridep-dir
    the hybridep arm gets ``hybridep_env`` (no UCCL path), every other arm (and every arm without it) the
    --uccl-dir one of ``uccl_env``."""
    env = {"PYTHONUNBUFFERED": "1", **{k: os.environ.get(k, v) for k, v in NO_MULTICAST.items()}}
    notes: list[str] = []
    if uses_hybridep_dir(args, arm):
        added, notes = hybridep_env(args.hybridep_dir, os.environ, args.uccl_dir)
        env.update(added)
    elif args.uccl_dir is not None:
        added, notes = uccl_env(args.uccl_dir, os.environ)
        env.update(added)
    return env, notes


def arm_envs(args: argparse.Namespace) -> dict[str, tuple[dict[str, str], list[str]]]:
    """``child_env`` of every arm of the grid."""
    return {arm: child_env(args, arm) for arm in args.arms}


def env_key(env: Mapping[str, str]) -> str:
    return json.dumps(dict(env), sort_keys=True)


# --------------------------------------------------------------------------------------------------------------
# Probe
# --------------------------------------------------------------------------------------------------------------

PROBE = r"""
import json, sys
out = {"python": sys.version.split()[0]}
def err(e):
    return f"{type(e).__name__}: {e}"
try:
    import uccl
    out["uccl_file"] = getattr(uccl, "__file__", None)
    out["uccl_version"] = getattr(uccl, "__version__", None)
    try:
        import uccl.ep as ep
        out["uccl_ep_file"] = getattr(ep, "__file__", None)
    except BaseException as e:
        out["uccl_ep_error"] = err(e)
except BaseException as e:
    out["uccl_error"] = err(e)
from cloudai_mbridge.payload.train.log import deep_ep_provider, import_deep_ep
try:
    mod, error = import_deep_ep()
except BaseException as e:  # import_deep_ep catches Exception; SystemExit & co. land here
    mod, error = None, err(e)
out["deep_ep_file"] = getattr(mod, "__file__", None) if mod is not None else None
out["deep_ep_error"] = error
out["provider"] = deep_ep_provider(mod)
if mod is not None:
    out["deep_ep_has_buffer"] = hasattr(mod, "Buffer")
    out["deep_ep_has_hybridep"] = hasattr(mod, "HybridEPBuffer")
    try:  # what Megatron's fused all-to-all imports (fused_a2a.py): a missing symbol shows up here
        from deep_ep import Buffer  # noqa: F401
        from deep_ep.utils import EventHandle, EventOverlap  # noqa: F401
        out["megatron_symbols_error"] = None
    except BaseException as e:
        out["megatron_symbols_error"] = err(e)
    try:
        from megatron.core.transformer.moe import fused_a2a
        out["megatron_have_deep_ep"] = getattr(fused_a2a, "HAVE_DEEP_EP", None)
        out["megatron_have_hybridep"] = getattr(fused_a2a, "HAVE_HYBRIDEP", None)
    except BaseException as e:
        out["megatron_fused_a2a_error"] = err(e)
print("PROBE_JSON " + json.dumps(out), flush=True)
"""


def probe(env: Mapping[str, str], timeout_s: float = 180) -> dict[str, Any]:
    """Import uccl / deep_ep in a child process with the payload's environment (see module docstring)."""
    full = {**os.environ, **env}
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=full, cwd=ROOT,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"provider": "none", "deep_ep_error": f"probe timed out after {timeout_s:.0f} s", "returncode": None}
    result: dict[str, Any] = {"returncode": proc.returncode, "wall_s": round(time.perf_counter() - start, 2)}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE_JSON ")]
    if lines:
        result.update(json.loads(lines[-1].removeprefix("PROBE_JSON ")))
    else:  # the interpreter died inside an import (a signal from a .so, a CUDA init failure)
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        result.update(provider="none", deep_ep_error=f"probe process {how} before reporting")
    stderr = [ln for ln in proc.stderr.splitlines() if ln.strip() and "Warning" not in ln and "warnings.warn" not in ln]
    if stderr:
        result["stderr_tail"] = "\n".join(stderr[-8:])
    return result


def print_probe(p: Mapping[str, Any], env_notes: list[str], env: Mapping[str, str], arms: list[str] | None = None,
                label: str = "uccl-dir") -> None:
    whose = f" of arm(s) {', '.join(arms)}" if arms else ""
    print(f"probe (child process, the payload's environment{whose}):")
    for key in ("PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME", "HYBRID_EP_CACHE_DIR"):
        if key in env:
            print(f"  {key}={env[key]}")
    for note in env_notes:
        print(f"  {label}: {note}")
    uccl = (f"uccl {p.get('uccl_version')} ({p.get('uccl_file')})" if "uccl_file" in p
            else f"uccl: {p.get('uccl_error')}")
    if "uccl_file" in p:
        uccl += f"; uccl.ep {p['uccl_ep_file']}" if p.get("uccl_ep_file") else f"; uccl.ep: {p.get('uccl_ep_error')}"
    print(f"  {uccl}")
    if p.get("deep_ep_file"):
        print(f"  deep_ep {p['deep_ep_file']} provider={p['provider']} Buffer={p.get('deep_ep_has_buffer')} "
              f"HybridEPBuffer={p.get('deep_ep_has_hybridep')}")
        if p.get("megatron_symbols_error"):
            print(f"  deep_ep lacks what megatron's fused_a2a imports: {p['megatron_symbols_error']}")
        if "megatron_fused_a2a_error" in p:
            print(f"  megatron fused_a2a: {p['megatron_fused_a2a_error']}")
        else:
            print(f"  megatron fused_a2a: HAVE_DEEP_EP={p.get('megatron_have_deep_ep')} "
                  f"HAVE_HYBRIDEP={p.get('megatron_have_hybridep')}")
    else:
        print(f"  deep_ep: does not import: {p.get('deep_ep_error')} (provider={p.get('provider')})")
    if p.get("stderr_tail"):
        print("  stderr: " + p["stderr_tail"].replace("\n", "\n          "))


def probe_blocks(arm: str, p: Mapping[str, Any], deepep_impl: str, want_dir: Path | None = None) -> str | None:
    """Why the probe (of this arm's environment) says this arm's runs cannot work here (None: let it run).
    ``want_dir``: the folder this arm's deep_ep must come from (--hybridep-dir for the hybridep arm)."""
    if arm not in DEEP_EP_ARMS:
        return None
    if not p.get("deep_ep_file"):
        return f"deep_ep does not import: {p.get('deep_ep_error')}"
    if want_dir is not None and not Path(p["deep_ep_file"]).resolve().is_relative_to(want_dir.resolve()):
        return f"deep_ep comes from {p['deep_ep_file']} ({p.get('provider')}), not from {want_dir.resolve()}"
    if p.get("megatron_symbols_error"):
        return f"deep_ep ({p['provider']}) lacks a symbol megatron imports: {p['megatron_symbols_error']}"
    if arm == "deepep" and p.get("megatron_have_deep_ep") is False:
        return f"megatron-core's fused_a2a has HAVE_DEEP_EP=False with deep_ep {p['deep_ep_file']}"
    if arm == "hybridep" and not p.get("deep_ep_has_hybridep"):
        return (f"deep_ep ({p['provider']}, {p['deep_ep_file']}) has no HybridEPBuffer: HybridEP needs NVIDIA "
                "DeepEP's hybrid-ep build")
    if arm == "hybridep" and p.get("megatron_have_hybridep") is False:
        return f"megatron-core's fused_a2a has HAVE_HYBRIDEP=False with deep_ep {p['deep_ep_file']}"
    if arm == "deepep" and p.get("provider") != deepep_impl:
        return (f"deepep_impl = {deepep_impl} but `import deep_ep` gives the {p.get('provider')} one "
                f"({p['deep_ep_file']}); the payload would refuse it (train_log.check_deep_ep)")
    return None


# --------------------------------------------------------------------------------------------------------------
# Grid
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Point:
    point: str  # mbs and overlap: the A/B cell
    arm: str  # dispatcher
    mbs: int
    overlap: bool
    plan: TrainingPlan
    start: int = 0  # which process start of this (point, arm): --starts repeats every run in a fresh process
    rejected: list[dict[str, Any]] = field(default_factory=list)  # rule verdicts (rule, message, fix, fields)
    status: str = "planned"  # planned | rejected | blocked | skipped | ok | failed | <metrics status>
    reason: str | None = None
    row: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.point}_{self.arm}" + (f"_s{self.start}" if self.start else "")


def point_name(mbs: int, overlap: bool) -> str:
    return f"mbs{mbs}_overlap-{'on' if overlap else 'off'}"


def make_plan(args: argparse.Namespace, arm: str, mbs: int, overlap: bool) -> TrainingPlan:
    gpus = args.gpus
    return TrainingPlan(
        model=get_model(args.model), gpu=get_gpu(args.gpu), num_nodes=1, gpus_per_node=gpus, tp=1, pp=1, cp=1,
        ep=gpus, etp=1, mbs=mbs, gbs=mbs * gpus * args.microbatches, seq_length=args.seq, train_iters=args.iters,
        dispatcher=arm, deepep_impl=arm_deepep_impl(args, arm), moe_a2a_overlap=overlap,
        bridge_version=args.bridge_version, moe_expert_rank_capacity_factor=args.capacity_factor, recompute="none",
        precision="bf16",
        force_balanced_routing=True, sequence_parallel=False, use_distributed_optimizer=True, optimizer="adam",
        transformer_impl="local" if args.engine == "mcore" else "transformer_engine",
        moe_shared_expert_overlap=False if args.shared_expert_overlap == "off" else None,
    )


def payload_config(plan: TrainingPlan, args: argparse.Namespace, output_dir: str) -> dict[str, Any]:
    return training_config(plan, data="mock", seed=args.seed, log_interval=1, engine=args.engine, lr=args.lr,
                           output_dir=output_dir, checkpoint_dir=None, hf_model_id=None, use_distributed_optimizer=True,
                           hang_timeout_s=getattr(args, "hang_timeout_s", HANG_TIMEOUT_S))


def rejections(plan: TrainingPlan, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rule set's violations, plus the mcore engine's limits as rule ``mcore-engine`` (as
    workloads/training/test_definition.py _engine_violations reports them)."""
    from cloudai_mbridge.payload.train.config import mcore_unsupported

    found = [{"rule": v.rule, "message": v.message, "fix": v.fix, "fields": {k: repr(x) for k, x in v.fields.items()}}
             for v in TRAINING_RULES.check(plan)]
    if args.engine == "mcore":
        for message in mcore_unsupported(payload_config(plan, args, "/tmp/run")):
            what, _, fix = message.partition("; ")
            found.append({"rule": "mcore-engine", "message": what, "fix": fix, "fields": {"engine": "'mcore'"}})
    return found


def build_grid(args: argparse.Namespace) -> list[Point]:
    """Every (mbs, overlap, arm) point, repeated --starts times. Order: start by start, and inside a start point by
    point with the arms back to back, so that a drift of the host over the campaign falls on every arm alike."""
    points = []
    for start in range(args.first_start, args.first_start + args.starts):
        for mbs in args.mbs:
            for overlap in args.overlaps:
                for arm in args.arms:
                    plan = make_plan(args, arm, mbs, overlap)
                    p = Point(point_name(mbs, overlap), arm, mbs, overlap, plan, start)
                    p.rejected = rejections(plan, args)
                    if p.rejected:
                        p.status = "rejected"
                        p.reason = "; ".join(f"[{v['rule']}] {v['message']}" for v in p.rejected)
                    points.append(p)
    return points


def arm_notes(points: list[Point], args: argparse.Namespace) -> dict[str, str]:
    """A reason per arm whose every point one rule rejects (e.g. a flex arm on one GPU)."""
    notes = {}
    for arm in args.arms:
        mine = [p for p in points if p.arm == arm]
        common = set.intersection(*({v["rule"] for v in p.rejected} for p in mine)) if mine else set()
        if not common:
            continue
        rule = sorted(common)[0]
        v = next(v for v in mine[0].rejected if v["rule"] == rule)
        note = f"every point rejected by [{rule}] {v['message']}"
        if rule == "flex-dispatcher-ep":
            note = (f"cannot run with --gpus {args.gpus}: needs >= 2 GPUs (ep = gpus, and {FLEX_ASSERT}); "
                    f"rule [{rule}]: {v['message']}")
        notes[arm] = note
    return notes


def describe_config(cfg: Mapping[str, Any], plan: TrainingPlan) -> str:
    flex = cfg["dispatcher"] != BASELINE
    built = f"flex/{cfg['dispatcher']}" if flex else "alltoall"
    return (f"world {cfg['world_size']} ep {cfg['ep']} dp {cfg['dp']} mbs {cfg['mbs']} gbs {cfg['gbs']} "
            f"(microbatches {plan.num_microbatches}) seq {cfg['seq_length']} iters {cfg['train_iters']} "
            f"seed {cfg['seed']} balanced {cfg['force_balanced_routing']} a2a_overlap {cfg['moe_a2a_overlap']} "
            f"dispatcher {built} deepep_impl {cfg['deepep_impl']} shared_expert_overlap {plan.shared_expert_overlap} "
            f"engine {cfg['engine']} lr {cfg.get('lr', 'recipe')}")


def print_grid(points: list[Point], notes: Mapping[str, str], blocked: Mapping[str, str], args: argparse.Namespace,
               configs: bool) -> None:
    n_run = sum(p.status == "planned" and p.arm not in blocked for p in points)
    overlaps = ", ".join("on" if o else "off" for o in args.overlaps)
    hybridep = " (hybridep arm: nvidia, --hybridep-dir)" if uses_hybridep_dir(args, "hybridep") else ""
    print(f"grid: {len(points)} points = {len(args.arms)} arms ({', '.join(args.arms)}) x mbs {list(args.mbs)} x "
          f"overlap [{overlaps}] x {args.starts} start(s); "
          f"{sum(p.status == 'rejected' for p in points)} rejected by the rules, "
          f"{sum(p.status == 'planned' and p.arm in blocked for p in points)} blocked by the probe, {n_run} to run")
    print(f"model {args.model}, gpu {args.gpu} x {args.gpus} (ep {args.gpus}), seq {args.seq}, iters {args.iters} "
          f"(warm-up {args.warmup}), seed {args.seed}, balanced routing on, engine {args.engine}, mock data, "
          f"deepep_impl {args.deepep_impl}{hybridep}, "
          f"lr {'recipe schedule' if args.lr is None else f'{args.lr:g} constant'}")
    for arm, note in notes.items():
        print(f"arm {arm}: {note}")
    for arm, why in blocked.items():
        print(f"arm {arm}: blocked by the probe{' (this host)' if args.dry_run else ''}: {why}")
    for p in points:
        verdict = "reject" if p.status == "rejected" else "blocked" if p.arm in blocked else "run"
        print(f"  {p.point:>18} {p.arm:>9} {verdict:>7}", end="")
        if p.rejected:
            print("  " + "; ".join(f"[{v['rule']}] {v['message']}" for v in p.rejected))
        else:
            print()
        if configs and not p.rejected:
            print(f"  {'':>18} {'':>9} {'':>7}  config: {describe_config(payload_config(p.plan, args, '-'), p.plan)}")


# --------------------------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------------------------


def run_point(p: Point, args: argparse.Namespace, env: Mapping[str, str], timeout_s: float) -> dict[str, Any]:
    from cloudai_mbridge.payload.refit.local import launch

    folder = args.out / "runs" / p.name
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    cfg = payload_config(p.plan, args, str(folder))
    (folder / "mbridge_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    start = time.perf_counter()
    # the rank logs are written as the ranks print (a start killed from outside still leaves them); a start past its
    # timeout gets SIGUSR1 (stacks), then its process groups SIGTERM and SIGKILL (payload/refit/local.py launch)
    run = launch(cfg, p.plan.world_size, timeout=timeout_s, module="cloudai_mbridge.payload.train", cwd=ROOT,
                 env=dict(env), log_dir=folder / "logs")
    wall = time.perf_counter() - start
    timed_out = run.timed_out
    return {"run_folder": str(folder), "returncodes": run.returncodes, "wall_s": round(wall, 1),
            "timed_out": timed_out, "timeout_s": timeout_s, "tail": None if run.returncodes == [0] * len(
                run.returncodes) else run.describe()[-3000:]}


def measure(folder: Path, warmup: int) -> tuple[dict[str, Any], Any]:
    """parse_training_run's numbers for the table and the JSON."""
    from cloudai_mbridge.metrics import parse_training_run
    from cloudai_mbridge.metrics.signals import HANG_KINDS, failure_label

    m = parse_training_run(folder, warmup=warmup)
    it, d = m.iteration_time_ms, m.validity.dispatcher
    failure = None
    if m.failure.findings:
        kind = m.failure.primary
        f = next((f for f in m.failure.findings if f.kind == kind), m.failure.findings[0])
        # a hang says where: "hang at first dispatch: MBRIDGE_HANG ..." (metrics/signals.py failure_label)
        failure = f"{f.kind}: {f.detail}" if f.kind not in HANG_KINDS else f"{failure_label(f)}: {f.detail}"
    return {
        "status": m.status, "problems": list(m.problems), "failure": failure, "summary": m.summary(),
        "iteration_ms": {"n": it.n, "n_warmup": it.n_warmup, "mean": it.mean, "median": it.median, "p10": it.p10,
                         "p90": it.p90, "min": it.min, "max": it.max, "stdev": it.stdev, "stalls": it.n_stalls},
        "tflops_per_gpu_median": m.tflops_per_gpu.median, "tokens_per_s_median": m.tokens_per_s.median,
        "dispatcher_built": d.built, "dispatcher_backend": d.backend, "deep_ep_module": d.deep_ep_module,
        "deep_ep_provider": d.deep_ep_provider, "downgraded": d.downgraded,
        "iterations_ms": [r.elapsed_ms for r in m.iterations],
        "iterations_sum_s": round(sum(r.elapsed_ms or 0.0 for r in m.iterations) / 1000.0, 2),
    }, m


def failure_reason(row: Mapping[str, Any]) -> str | None:
    """Why a run did not produce numbers, as precisely as the logs say (None: no identifiable reason)."""
    if row.get("failure"):
        return row["failure"]
    if row.get("timed_out"):
        return f"timed out after {row['timeout_s']:.0f} s (all ranks' process groups killed)"
    return None


def hung(row: Mapping[str, Any]) -> bool:
    """The start hung (the payload's watchdog, or a log that stops at a stage) or ran past its timeout."""
    return bool(row.get("timed_out")) or str(row.get("failure") or "").startswith("hang ")


def catalog_gpu_name() -> str | None:
    """The catalog key of GPU 0 (``NVIDIA H200`` -> h200), None without a known GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        name = torch.cuda.get_device_name(0)
    except Exception:
        return None
    return gpu_for_device_name(name)


# --------------------------------------------------------------------------------------------------------------
# A/B report adapter
# --------------------------------------------------------------------------------------------------------------


CLOUDAI_SITE_ENV = "MBRIDGE_CLOUDAI_SITE"
CLOUDAI_SITE_DEFAULT = "/tmp/cloudai_site"  # where gpu_cloudai_ab_run.sh installs CloudAI's wheels on a GPU host


def find_cloudai(environ: Mapping[str, str] = os.environ) -> str | None:
    """Makes CloudAI importable for the A/B report when the host was given it as a folder of installed wheels (the
    set-up's ``cloudai_site``: $MBRIDGE_CLOUDAI_SITE, else /tmp/cloudai_site) rather than in this interpreter: that
    folder goes at the END of sys.path of this process only (the stack's own packages keep precedence; the training
    runs this script starts never see it). Returns where CloudAI comes from, None when it is not found."""
    import importlib.util

    spec = importlib.util.find_spec("cloudai")
    if spec is not None:
        return str(Path(spec.origin or "").parent)
    site = environ.get(CLOUDAI_SITE_ENV) or CLOUDAI_SITE_DEFAULT
    if not (Path(site) / "cloudai" / "__init__.py").is_file():
        return None
    sys.path.append(site)
    importlib.invalidate_caches()
    return f"{site}/cloudai ({CLOUDAI_SITE_ENV if environ.get(CLOUDAI_SITE_ENV) else 'default site'})"


def ab_report(run_dirs: list[Path], out: Path, warmup: int, name: str = "gpu_dispatcher_ab") -> list[dict[str, Any]]:
    """reports/ab.py's ``mbridge_ab`` scenario report on run folders made outside a CloudAI scenario
    (cloudai_mbridge/reports/folders.py: a real TestScenario of one real TestRun per folder; everything else, cells,
    baseline alltoall, steady-state means after ``warmup`` iterations, gates, loss equivalence, verdict, CSV/HTML/PNG
    into ``out``, is ab.py's own code). CloudAI comes from this interpreter or the host's CloudAI site
    (find_cloudai)."""
    where = find_cloudai()
    print(f"A/B report: CloudAI from {where or 'nowhere (not importable, no ' + CLOUDAI_SITE_ENV + ' site)'}")
    from cloudai_mbridge.reports.folders import ab_report as folder_ab_report

    return folder_ab_report(run_dirs, out, warmup, name)


# --------------------------------------------------------------------------------------------------------------
# Report: table, A/B, RESULT lines
# --------------------------------------------------------------------------------------------------------------


def _f(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def print_runs(rows: list[dict[str, Any]]) -> None:
    print("\nruns: iteration time over the steady-state iterations (after the warm-up), ms: median [p10-p90] "
          "(min-max) n; TFLOP/s/GPU and tokens/s: medians (payload's FLOP count, gbs x seq / iteration time)")
    print(f"{'point':>18} {'arm':>9} {'status':>22} {'median':>8} {'p10-p90':>15} {'min-max':>15} {'n':>3} "
          f"{'TFLOP/s':>8} {'tokens/s':>9} {'deep_ep':>8}  (deep_ep: what the payload imported, MBRIDGE_DEEP_EP)")
    for r in rows:
        it = r.get("iteration_ms") or {}
        print(f"{r['point']:>18} {r['arm']:>9} {r['status'][:22]:>22} {_f(it.get('median')):>8} "
              f"{_f(it.get('p10')) + '-' + _f(it.get('p90')):>15} {_f(it.get('min')) + '-' + _f(it.get('max')):>15} "
              f"{it.get('n', '-')!s:>3} {_f(r.get('tflops_per_gpu_median')):>8} "
              f"{_f(r.get('tokens_per_s_median'), '.0f'):>9} {r.get('deep_ep_provider') or '-':>8}")
        if r.get("reason") and r["status"] not in ("ok",):
            print(f"{'':>18} {'':>9}   reason: {r['reason'][:400]}")


def pair_point(rows: list[dict[str, Any]], ab_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ab.py's rows with our point names (from the run folders they name), in grid order, plus the same delta on
    the steady-state MEDIANS (ab.py's delta uses means, which one slow iteration of four can move)."""
    by_folder = {str(Path(r["run_folder"]).resolve()): r for r in rows if r.get("run_folder")}
    order = {r.get("point"): i for i, r in enumerate(rows)}
    named = []
    for a in ab_rows:
        base = by_folder.get(str(Path(a["base_run"]).resolve()), {}) if a.get("base_run") else {}
        arm = by_folder.get(str(Path(a["arm_run"]).resolve()), {}) if a.get("arm_run") else {}
        point = arm.get("point") or base.get("point") or a.get("cell")
        b_med = (base.get("iteration_ms") or {}).get("median")
        a_med = (arm.get("iteration_ms") or {}).get("median")
        delta_median = (a_med - b_med) / b_med * 100.0 if a_med is not None and b_med else None
        named.append({**a, "point": point, "delta_median_pct": delta_median})
    return sorted(named, key=lambda a: (order.get(a["point"], len(order)), str(a.get("arm"))))


def winner(verdict: str | None) -> str:
    if not verdict:
        return "none"
    if verdict.endswith(" faster"):
        return verdict.removesuffix(" faster")
    return "tie" if verdict == "tie" else "none"


def print_pairs(pairs: list[dict[str, Any]]) -> None:
    print("\nA/B (reports/ab.py mbridge_ab): delta = (arm - alltoall) / alltoall x 100 of the steady-state MEAN "
          "iteration time (base/arm ms: those means); negative = arm faster; verdict/winner only when both arms pass "
          "the gates and did equal work (loss rel diff <= 1e-3). med delta: the same on the medians (ours, for the "
          "spread)")
    print(f"{'point':>18} {'arm':>9} {'base ms':>8} {'arm ms':>8} {'delta %':>8} {'med delta %':>11} "
          f"{'loss rel diff':>13} verdict")
    for a in pairs:
        if a.get("arm") is None:
            print(f"{a['point']:>18} {'-':>9} {_f(_ms(a.get('base_time_s'))):>8} {'-':>8} {'-':>8} {'-':>11} "
                  f"{'-':>13} {a['verdict']} ({a['baseline']} alone)")
            continue
        print(f"{a['point']:>18} {a['arm']:>9} {_f(_ms(a.get('base_time_s'))):>8} {_f(_ms(a.get('arm_time_s'))):>8} "
              f"{_f(a.get('delta_pct'), '+.1f'):>8} {_f(a.get('delta_median_pct'), '+.1f'):>11} "
              f"{_f(a.get('loss_max_rel_diff'), '.1e'):>13} {a['verdict']}")
        d, dm = a.get("delta_pct"), a.get("delta_median_pct")
        if d is not None and dm is not None and d * dm < 0:
            print(f"{'':>18} {'':>9}   note: the mean and median deltas disagree in sign: the verdict rests on the "
                  "spread (a slow iteration), not on a steady difference; rerun with more --iters")


def _ms(s: float | None) -> float | None:
    return None if s is None else s * 1000.0


def finish(result: dict[str, Any], out: Path, warmup: int, rerun_hint: str) -> tuple[int, list[dict[str, Any]]]:
    """Metrics of every run folder, the A/B report over them, the tables and the RESULT lines. Returns (number of
    points that produced steady-state numbers, A/B rows)."""
    rows = [r for r in result["points"] if r.get("run_folder")]
    for r in rows:
        folder = Path(r["run_folder"])
        if not folder.is_absolute() or not folder.exists():
            folder = out / "runs" / Path(r["run_folder"]).name  # a folder unpacked elsewhere (--report)
            r["run_folder"] = str(folder)
        numbers, _ = measure(folder, warmup)
        r.update(numbers)
        r["status"] = "ok" if numbers["status"] == "ok" else numbers["status"]
        if r["status"] != "ok":
            r["reason"] = failure_reason(r) or r.get("reason") or ", ".join(numbers["problems"])
    print_runs(result["points"])
    flex = [r for r in rows if r["arm"] != BASELINE and r.get("deep_ep_module")]
    for r in flex:
        print(f"payload {r['name']}: imported deep_ep {r['deep_ep_module']} provider={r['deep_ep_provider']} "
              f"(built {r.get('dispatcher_built')}/{r.get('dispatcher_backend')})")
    pairs: list[dict[str, Any]] = []
    try:
        ab_rows = ab_report([Path(r["run_folder"]) for r in rows], out, warmup)
        pairs = pair_point(rows, ab_rows)
        files = sorted(p.name for p in out.glob("mbridge_ab*"))
        result["ab"] = {"rows": pairs, "files": files, "warmup": warmup}
        print_pairs(pairs)
        print(f"A/B report files in {out}: {', '.join(files) or 'none'}")
    except ImportError as exc:
        result["ab"] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"\nA/B report not run here: reports/ab.py needs CloudAI ({type(exc).__name__}: {exc}); set "
              f"{CLOUDAI_SITE_ENV} to the folder CloudAI's wheels were installed into (default "
              f"{CLOUDAI_SITE_DEFAULT}), or run `{rerun_hint}` on a host with CloudAI installed (the run folders and "
              "this JSON are all it reads)")
    ran = [r for r in rows if r["status"] == "ok"]
    for r in ran:
        print(f"RESULT ab_iteration_ms_{r['name']}={r['iteration_ms']['median']:.1f} ms")
    for a in pairs:
        if a.get("arm") is None:
            continue
        if a.get("delta_pct") is not None:
            print(f"RESULT ab_delta_pct_{a['point']}_{a['arm']}={a['delta_pct']:+.1f} %")
        if a.get("delta_median_pct") is not None:
            print(f"RESULT ab_delta_median_pct_{a['point']}_{a['arm']}={a['delta_median_pct']:+.1f} %")
        print(f"RESULT ab_winner_{a['point']}_{a['arm']}={winner(a.get('verdict'))}")
    payload_providers = sorted({r["deep_ep_provider"] for r in flex if r.get("deep_ep_provider")})
    provider = ",".join(payload_providers) or result.get("probe", {}).get("provider") or "none"
    print(f"RESULT deep_ep_provider={provider}")
    print(f"RESULT ab_points_run={len(ran)} count")
    compared = [a for a in pairs if a.get("arm") is not None
                and not str(a.get("verdict")).startswith(("invalid", "different", "work not"))]
    full = [a for a in compared if min(a.get("base_starts", 1), a.get("arm_starts", 1)) >= 3]
    print(f"RESULT ab_cells_compared={len(compared)} count")
    print(f"RESULT ab_bridge_cells={len(full)} count (compared cells with >= 3 starts per arm)")
    return len(ran), pairs


# --------------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="output folder (required unless --dry-run or --report)")
    parser.add_argument("--dry-run", action="store_true", help="grid, rule verdicts, payload configs; no GPU")
    parser.add_argument("--report", type=Path, metavar="OUT",
                        help="metrics + A/B report of the run folders an earlier run wrote into OUT; no GPU")
    parser.add_argument("--gpus", type=int, help="GPUs on the node = ep (default: torch.cuda.device_count())")
    parser.add_argument("--gpu", default="auto", choices=["auto", *sorted(GPUS)],
                        help="catalog GPU for the plans (auto: from torch's device name, else h200)")
    parser.add_argument("--model", default="kimi_k2_proxy", choices=["kimi_k2_proxy", "deepseek_v3_proxy"])
    parser.add_argument("--mbs", type=int, nargs="+", default=list(MBS_DEFAULT))
    parser.add_argument("--microbatches", type=int, default=4, help="gbs = mbs x dp x this")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=8)
    parser.add_argument("--warmup", type=int, help="iterations dropped before the statistics (default: metrics' 4)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--engine", default="mcore", choices=["mcore", "bridge", "auto"])
    parser.add_argument("--deepep-impl", default="auto", choices=["auto", "uccl", "nvidia"],
                        help="the DeepEP the deepep arm must get (auto: the probe's provider, else uccl)")
    parser.add_argument("--shared-expert-overlap", choices=("auto", "off"), default="auto",
                        help="auto: as the recipes set it (on for alltoall only); off: off in every arm, so the "
                             "arms differ in the dispatcher alone")
    parser.add_argument("--with-hybridep", action="store_true", help="add the flex/HybridEP arm")
    parser.add_argument("--arms", nargs="+", choices=[BASELINE, *FLEX_ARMS],
                        help=f"dispatchers to run (default: {BASELINE} deepep [hybridep]); {BASELINE} is the baseline")
    parser.add_argument("--starts", type=int, default=1, help="process starts per (point, arm), interleaved")
    parser.add_argument("--first-start", type=int, default=0,
                        help="number the starts from this one (run folders <point>_<arm>_s<N>): a later run on "
                             "the SAME host adds starts to an earlier run's cell (put both runs' run folders "
                             "in one folder for --report; the report refuses a cell whose runs recorded different "
                             "machines). With it, --arms may leave out the baseline.")
    parser.add_argument("--overlap", choices=("off", "on", "both"), default="both", help="a2a overlap points")
    parser.add_argument("--bridge-version", default="0.6", choices=("0.4", "0.5", "0.6"),
                        help="the Megatron-Bridge release the rules check against (bridge engine)")
    parser.add_argument("--capacity-factor", type=float, default=1.5,
                        help="moe_expert_rank_capacity_factor (the ncclep arm's receive budget; others ignore it)")
    parser.add_argument("--uccl-dir", type=Path, help="folder with UCCL's deep_ep/ and lib/ (e.g. .whl/uccl)")
    parser.add_argument("--hybridep-dir", type=Path,
                        help="folder with NVIDIA DeepEP's hybrid-ep build (deep_ep/ with HybridEPBuffer, e.g. "
                             "/tmp/mbridge_stack/hybridep/site from benchmarks/gpu_hybridep_build.sh): the hybridep "
                             "arm runs with it first on PYTHONPATH, without --uccl-dir, and deepep_impl nvidia; the "
                             "other arms are unchanged")
    parser.add_argument("--timeout-s", type=int, default=240,
                        help="per run: the ranks still running then get SIGUSR1 (their stacks into the log), then "
                             "SIGTERM and SIGKILL to their process groups; the start is a failed start and the "
                             "remaining starts run")
    parser.add_argument("--hang-timeout-s", type=int, default=HANG_TIMEOUT_S,
                        help="the payload's progress watchdog (config key hang_timeout_s): a rank with no new stage or "
                             "iteration for this long prints its stacks and MBRIDGE_HANG and exits 124 (0 = off); "
                             "keep it under --timeout-s")
    parser.add_argument("--budget-s", type=float, help="skip runs that would start later than this many seconds")
    parser.add_argument("--min-run-s", type=float, default=45.0,
                        help="with --budget-s: start a run only while this much of the budget is left (a bridge-engine "
                             "run of 20 iterations on 4 x H100 took 74-104 s)")
    parser.add_argument("--keep-going", action="store_true", help="run a flex arm's other points after it failed")
    parser.add_argument("--lr", type=float, metavar="FLOAT",
                        help="constant learning rate, no warmup, in every arm (default: the recipe's schedule); a "
                             "stable run keeps rounding differences between dispatchers from growing")
    args = parser.parse_args(argv)
    if args.out is None and not args.dry_run and args.report is None:
        parser.error("--out is required unless --dry-run or --report")
    if args.warmup is None:
        from cloudai_mbridge.metrics.training import DEFAULT_WARMUP

        args.warmup = DEFAULT_WARMUP
    if args.report is None and args.iters <= args.warmup:
        parser.error(f"--iters {args.iters} leaves no steady-state iteration after --warmup {args.warmup}")
    if args.arms is None:
        args.arms = [BASELINE, "deepep", *(["hybridep"] if args.with_hybridep else [])]
    elif BASELINE not in args.arms and args.first_start == 0:
        parser.error(f"--arms must include the baseline {BASELINE} (or add starts to an earlier run's cell "
                     "with --first-start N)")
    arms = dict.fromkeys(args.arms)
    args.arms = [*([BASELINE] if BASELINE in arms else []), *[a for a in arms if a != BASELINE]]
    if args.first_start < 0:
        parser.error("--first-start must be >= 0")
    if args.lr is not None and not (math.isfinite(args.lr) and 0 < args.lr <= 1):
        parser.error(f"--lr {args.lr} must be a finite number > 0 and <= 1")
    args.overlaps = {"off": [False], "on": [True], "both": list(OVERLAPS)}[args.overlap]
    if args.starts < 1:
        parser.error("--starts must be >= 1")
    if args.hang_timeout_s < 0:
        parser.error(f"--hang-timeout-s {args.hang_timeout_s} must be >= 0 (0 = off)")
    return args


def report_only(args: argparse.Namespace, argv: list[str]) -> int:
    out = args.report
    saved = out / "gpu_dispatcher_ab.json"
    if saved.is_file():
        result = json.loads(saved.read_text())
    else:  # bare run folders: the configs say which point and arm each one is
        result = {"experiment": "gpu_dispatcher_ab", "points": []}
        for cfg_path in sorted(out.glob("runs/*/mbridge_config.json")):
            c = json.loads(cfg_path.read_text())
            point = point_name(c["mbs"], bool(c["moe_a2a_overlap"]))
            result["points"].append({"name": f"{point}_{c['dispatcher']}", "point": point, "arm": c["dispatcher"],
                                     "status": "ran", "run_folder": str(cfg_path.parent)})
    if not any(r.get("run_folder") for r in result["points"]):
        print(f"error: no run folders under {out}/runs", file=sys.stderr)
        return 1
    result["report_provenance"] = provenance([f"benchmarks/{Path(__file__).name}", *argv])
    print(f"report of {out}: metrics (parse_training_run, warm-up {args.warmup}) and reports/ab.py over "
          f"{sum(bool(r.get('run_folder')) for r in result['points'])} run folder(s)")
    n_ran, _ = finish(result, out, args.warmup, f"python3 benchmarks/{Path(__file__).name} --report {out}")
    (out / "gpu_dispatcher_ab.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    return 0 if n_ran else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.report is not None:
        return report_only(args, argv)
    if not args.dry_run:  # before the probe and before anything is written; 2: this script's "host problem"
        require_gpu(__file__, args.gpus or 1, ("megatron.core",), code=2)
    if args.gpus is None:
        try:
            import torch

            args.gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except ImportError:
            args.gpus = 0
        if args.gpus == 0:  # a dry run (a real one stopped above)
            args.gpus = 2
            print("no GPU here: --gpus defaults to 2 for the dry run")
    if args.gpu == "auto":
        args.gpu = (None if args.dry_run else catalog_gpu_name()) or "h200"

    # One probe per distinct environment: the default one (every arm, as without --hybridep-dir) first, then the
    # hybridep arm's own with --hybridep-dir.
    env, env_notes = child_env(args)
    envs = arm_envs(args)
    probed: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys([env_key(env), *(env_key(e) for e, _ in envs.values())]):
        e, e_notes = next(((e, n) for e, n in envs.values() if env_key(e) == key), (env, env_notes))
        arms = [a for a in args.arms if env_key(envs[a][0]) == key]
        probed[key] = probe(e)
        print_probe(probed[key], e_notes, e, arms,
                    label="hybridep-dir" if any(uses_hybridep_dir(args, a) for a in arms) else "uccl-dir")
    p = probed[env_key(env)]
    arm_probe = {arm: probed[env_key(envs[arm][0])] for arm in args.arms}
    if args.deepep_impl == "auto":
        args.deepep_impl = p["provider"] if p.get("provider") in ("uccl", "nvidia") else "uccl"
    points = build_grid(args)
    notes = arm_notes(points, args)
    blocked = {arm: why for arm in args.arms if arm not in notes and (why := probe_blocks(
        arm, arm_probe[arm], arm_deepep_impl(args, arm), args.hybridep_dir if uses_hybridep_dir(args, arm) else None))}
    print_grid(points, notes, blocked, args, configs=args.dry_run)
    if args.dry_run:
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    info = provenance([f"benchmarks/{Path(__file__).name}", *argv])
    print(f"\ndevice: {info.get('gpus')} torch {info.get('torch')} megatron-core {info.get('megatron_core')}")
    result: dict[str, Any] = {
        "experiment": "gpu_dispatcher_ab", "provenance": info, "probe": p, "child_env": env, "env_notes": env_notes,
        "arm_probes": arm_probe, "arm_envs": {arm: {"env": e, "notes": n} for arm, (e, n) in envs.items()},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "arm_notes": notes, "blocked_arms": blocked, "points": [],
    }
    start = time.perf_counter()
    failed_arm: dict[str, str] = {}
    unexpected = []
    for pt in points:
        row: dict[str, Any] = {"name": pt.name, "point": pt.point, "arm": pt.arm, "start": pt.start, "mbs": pt.mbs,
                               "overlap": pt.overlap, "rejected": pt.rejected, "status": pt.status,
                               "reason": pt.reason}
        result["points"].append(row)
        if pt.status == "rejected":
            continue
        if pt.arm in blocked:
            row.update(status="blocked", reason=blocked[pt.arm])
            continue
        if pt.arm in failed_arm and not args.keep_going:
            row.update(status="skipped", reason=f"arm failed earlier: {failed_arm[pt.arm]}")
            continue
        timeout = float(args.timeout_s)
        if args.budget_s is not None:
            left = args.budget_s - (time.perf_counter() - start)
            if left < args.min_run_s:  # a run cut short by the budget is a wasted start, not a measurement
                row.update(status="skipped", reason=f"budget: {left:.0f} s left of --budget-s {args.budget_s:.0f}, "
                                                    f"a run needs --min-run-s {args.min_run_s:.0f}")
                continue
            timeout = min(timeout, left - 15)
        row.update(run_point(pt, args, envs[pt.arm][0], timeout))
        numbers, _ = measure(Path(row["run_folder"]), args.warmup)
        row.update(numbers)
        ok = numbers["status"] == "ok"
        row["status"] = "ok" if ok else numbers["status"]
        if not ok:
            reason = failure_reason(row)
            row["reason"] = reason or "no identifiable reason: " + ", ".join(numbers["problems"])
            if pt.arm == BASELINE or reason is None:
                unexpected.append(pt.name)
            elif not hung(row):  # a hang may be intermittent: the arm's other starts run and count it
                failed_arm[pt.arm] = f"{pt.point}: {reason}"
        it = row.get("iteration_ms") or {}
        # What the process spent outside its iterations: imports, init, model build, the first step's set-up is in it
        row["outside_iterations_s"] = round(row["wall_s"] - row.get("iterations_sum_s", 0.0), 1)
        print(f"[{pt.name}] status={row['status']} rc={row['returncodes']} wall_s={row['wall_s']} "
              f"outside_iterations_s={row['outside_iterations_s']} "
              f"median_ms={_f(it.get('median'))} deep_ep={row.get('deep_ep_provider')}", flush=True)
        if not ok:
            print(f"  reason: {row['reason'][:600]}", flush=True)
            if row.get("tail"):
                print(row["tail"][-1500:], flush=True)
        (args.out / "gpu_dispatcher_ab.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    for arm, why in failed_arm.items():
        print(f"arm {arm}: cannot run here: {why}")
    n_ran, _ = finish(result, args.out, args.warmup,
                      f"python3 benchmarks/{Path(__file__).name} --report <this --out folder>")
    result["date_utc_end"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result["unexpected_failures"] = unexpected
    (args.out / "gpu_dispatcher_ab.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    if unexpected:
        print(f"unexpected failures: {', '.join(unexpected)}", file=sys.stderr)
    return 1 if unexpected or not n_ran else 0


if __name__ == "__main__":
    sys.exit(main())
