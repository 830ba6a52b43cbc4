"""The lines the training payload prints that other code reads: Megatron-LM's per-iteration and memory lines, and our
own MBRIDGE_DISPATCHER / MBRIDGE_DEEP_EP lines that make a dispatcher A/B self-verifying. Pure stdlib.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from datetime import datetime
from types import ModuleType
from typing import Any

MEGABYTES = 1024.0 * 1024.0

# (moe_token_dispatcher_type, flex backend) each requested dispatcher must end up as in the built model.
EXPECTED_DISPATCH = {"alltoall": ("alltoall", "none"), "deepep": ("flex", "deepep"), "hybridep": ("flex", "hybridep"),
                     "ncclep": ("flex", "ncclep")}
DISPATCHER_CLASSES = {
    "MoEAlltoAllTokenDispatcher": "alltoall",
    "MoEFlexTokenDispatcher": "flex",
    "MoEAllGatherTokenDispatcher": "allgather",
}


class DispatcherError(RuntimeError):
    """The run would not measure the dispatcher it asked for: downgraded, or its DeepEP missing or of another kind."""


def iteration_line(*, timestamp: datetime, iteration: int, train_iters: int, consumed_samples: int,
                   elapsed_time_per_iteration: float, throughput: float | None, learning_rate: float,
                   batch_size: int, losses: dict[str, float], loss_scale: float, grad_norm: float | None,
                   skipped_iterations: int, nan_iterations: int, skipped_samples: int = 0) -> str:
    """Megatron-LM core_v0.16.1 training_log's stdout line, statement for statement (elapsed time in seconds).

    As there, a loss whose average is not positive (an untouched MoE tracker entry) is left out.
    """
    s = f" [{timestamp.strftime('%Y-%m-%d %H:%M:%S.%f')}]"
    s += f' iteration {iteration:8d}/{train_iters:8d} |'
    s += f' consumed samples: {consumed_samples:12d} |'
    if skipped_samples > 0:
        s += f' skipped samples: {skipped_samples:12d} |'
    s += f' elapsed time per iteration (ms): {elapsed_time_per_iteration * 1000.0:.1f} |'
    if throughput is not None:
        s += f' throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |'
    s += f' learning rate: {learning_rate:.6E} |'
    s += f' global batch size: {batch_size:5d} |'
    for key, avg in losses.items():
        if avg > 0.0:
            s += f' {key}: {avg:.6E} |'
    s += f' loss scale: {loss_scale:.1f} |'
    if grad_norm is not None:
        s += f' grad norm: {grad_norm:.3f} |'
    s += f' number of skipped iterations: {skipped_iterations:3d} |'
    s += f' number of nan iterations: {nan_iterations:3d} |'
    return s


def memory_line(*, rank: int, iteration: int, allocated: int, max_allocated: int, reserved: int,
                max_reserved: int) -> str:
    """Megatron-LM megatron/training/utils.py report_memory(f'(after {iteration} iterations)'), sizes in bytes."""
    s = f'(after {iteration} iterations)' + ' memory (MB)'
    s += f" | allocated: {allocated / MEGABYTES:.2f}"
    s += f" | max allocated: {max_allocated / MEGABYTES:.2f}"
    s += f" | reserved: {reserved / MEGABYTES:.2f}"
    s += f" | max reserved: {max_reserved / MEGABYTES:.2f}"
    return f"[Rank {rank}] {s}"


def device_memory_line(*, rank: int, iteration: int, free: int, total: int, reserved: int,
                       stage: str = "report") -> str:
    """What the driver sees besides the caching allocator: ``torch.cuda.mem_get_info()`` (free, total) at the same
    moment as the memory line (``stage=report``) or at a setup stage (``iteration=0``: ``process_groups`` once the
    parallel state's communicators exist, ``model``, ``optimizer``). ``used - reserved`` is the CUDA context,
    NCCL's buffers and anything allocated outside torch's allocator; sizes in MiB as Megatron prints them."""
    used = total - free
    return (f"MBRIDGE_DEVICE_MEMORY rank={rank} iteration={iteration} used_mib={used / MEGABYTES:.2f} "
            f"total_mib={total / MEGABYTES:.2f} reserved_mib={reserved / MEGABYTES:.2f} "
            f"outside_allocator_mib={(used - reserved) / MEGABYTES:.2f} stage={stage}")


def deep_ep_provider(module: ModuleType | None) -> str:
    """Which DeepEP answers `import deep_ep`: UCCL-EP's drop-in shadow, NVIDIA's DeepEP, or none.

    UCCL's shadow (uccl-project/uccl ep/deep_ep_wrapper) re-exports `Config` from `uccl.ep` and adds
    `initialize_uccl`/`destroy_uccl`; its install path need not contain "uccl" (setup.py installs package deep_ep).
    NVIDIA's has `Buffer` (and `HybridEPBuffer` on its hybrid-ep builds). Anything else is "unknown".
    """
    if module is None:
        return "none"
    path = (getattr(module, "__file__", None) or "").lower()
    config_module = getattr(getattr(module, "Config", None), "__module__", "") or ""
    if hasattr(module, "initialize_uccl") or config_module.startswith("uccl") or "uccl" in path:
        return "uccl"
    if hasattr(module, "Buffer") or hasattr(module, "HybridEPBuffer"):
        return "nvidia"
    return "unknown"


def import_deep_ep() -> tuple[ModuleType | None, str | None]:
    """The deep_ep module Megatron's fused all-to-all would use, and why it is missing if it is."""
    if "deep_ep" in sys.modules:
        return sys.modules["deep_ep"], None
    try:
        return importlib.import_module("deep_ep"), None
    except Exception as e:  # a broken build fails with anything from ImportError to a CUDA error
        return None, f"{type(e).__name__}: {e}"


def deep_ep_line(module: ModuleType | None) -> str:
    path = getattr(module, "__file__", None) if module is not None else None
    return f"MBRIDGE_DEEP_EP module={path or 'none'} provider={deep_ep_provider(module)}"


def check_deep_ep(dispatcher: str, deepep_impl: str | None, module: ModuleType | None, error: str | None,
                  environ: Any = None) -> None:
    """Before building anything: the requested flex backend has the DeepEP it needs, of the kind the plan expects.
    All-to-all and NCCL EP (Transformer Engine's, payload/train/nccl_ep.py) need none. ``nvidia_efa`` is NVIDIA's
    DeepEP (provider "nvidia") whose NVSHMEM must take the libfabric transport (NVSHMEM_REMOTE_TRANSPORT)."""
    if dispatcher in ("alltoall", "ncclep"):
        return
    if module is None:
        raise DispatcherError(
            f"dispatcher = {dispatcher!r} needs the deep_ep module, which does not import here ({error}); "
            "use an image with UCCL-EP or NVIDIA DeepEP installed, or dispatcher = 'alltoall'"
        )
    provider = deep_ep_provider(module)
    if dispatcher == "hybridep" and not hasattr(module, "HybridEPBuffer"):
        raise DispatcherError(
            f"dispatcher = 'hybridep' needs NVIDIA DeepEP's hybrid-ep build (deep_ep.HybridEPBuffer); the deep_ep "
            f"here ({provider}, {module.__file__}) has none"
        )
    expected = "nvidia" if deepep_impl == "nvidia_efa" else deepep_impl
    if dispatcher == "deepep" and expected is not None and provider != expected:
        raise DispatcherError(
            f"deepep_impl = {deepep_impl!r} but `import deep_ep` gives the {provider} one ({module.__file__}); "
            "an A/B labelled with the wrong DeepEP is invalid: fix the image or deepep_impl"
        )
    transport = (os.environ if environ is None else environ).get("NVSHMEM_REMOTE_TRANSPORT", "")
    if dispatcher == "deepep" and deepep_impl == "nvidia_efa" and transport != "libfabric":
        raise DispatcherError(
            f"deepep_impl = 'nvidia_efa' needs NVSHMEM's libfabric transport, but NVSHMEM_REMOTE_TRANSPORT = "
            f"{transport!r}; the job sets it (launch/training.py network_env): an image or wrapper overrode it"
        )


HYBRIDEP_DOMAIN_ENV = "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"


def hybridep_domain_env(cfg: dict[str, Any], environ: dict[str, str]) -> str | None:
    """An inherited NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN that HybridEP cannot use is removed before the model is
    built; returns the MBRIDGE_HYBRIDEP line saying so (None when nothing was changed).

    DeepEP's hybrid-ep HybridEPBuffer (deep_ep/hybrid_ep_buffer.py L62-L76 at 94a9f8f) takes the ranks per NVLink
    domain from that variable when it is set (warning when it differs from what it detects: the group's ranks whose
    memory it can map) and asserts that the group's size is a multiple of it. Seen on 4 x H200 (2026-11-28): the
    variable came in as 8 from the host's environment, DeepEP detected 4, and every rank died at its first dispatch
    with "The number of ranks 4 should be divisible by the number of ranks per node 8". A value that divides the
    group (etp x ep) is a choice (Bridge's GB200 recipes set 8 on a 72-GPU domain) and is kept; one that does not
    cannot run, so it is removed and DeepEP's own detection decides."""
    if cfg.get("dispatcher") != "hybridep" or HYBRIDEP_DOMAIN_ENV not in environ:
        return None
    group = _hybridep_group(cfg)
    value = environ[HYBRIDEP_DOMAIN_ENV]
    if _domain_divides(value, group):
        return None
    del environ[HYBRIDEP_DOMAIN_ENV]
    return (f"MBRIDGE_HYBRIDEP unset {HYBRIDEP_DOMAIN_ENV}={value!r} from the environment: it does not divide the "
            f"HybridEP group of {group} ranks (etp x ep), so HybridEPBuffer would assert; DeepEP detects the NVLink "
            "domain itself")


def _hybridep_group(cfg: dict[str, Any]) -> int:
    return int(cfg.get("etp") or 1) * int(cfg.get("ep") or 1)


def _domain_divides(value: Any, group: int) -> bool:
    try:
        return int(value) > 0 and group % int(value) == 0
    except (TypeError, ValueError):
        return False


def recipe_env_lines(cfg: dict[str, Any], recipe_env: dict[str, Any] | None, environ: Mapping[str, str]) -> list[str]:
    """What the recipe's own environment will do to this process, said before Bridge applies it; a HybridEP domain
    size in it that cannot divide the group is dropped from the recipe (``recipe_env`` is changed in place).

    Megatron-Bridge 0.6 recipes carry ``ConfigContainer.env_vars`` (config.py ``apply_environment_variables``), which
    pretrain/finetune apply with ``os.environ.setdefault`` when training starts, after the payload's own checks. The
    DeepSeek-V3 H100 recipes set NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN = 8 there (with NVLINK_DOMAIN_SIZE 8,
    USE_MNNVL 0). Seen on 2 x H200 (2026-11-29, `cloudai run`, DSV3 proxy, ep 2): every hybridep start died at its
    first dispatch with "The number of ranks 2 should be divisible by the number of ranks per node 8", although the
    job's environment had no such variable and DeepEP detected 2. The same rule as for an inherited value
    (``hybridep_domain_env``) applies; a value already in the environment wins, as Bridge's setdefault decides.
    Bridge 0.4 has no ``env_vars``: no lines. Values of the environment itself are never printed, only names."""
    if not recipe_env:
        return []
    lines = []
    group = _hybridep_group(cfg)
    value = recipe_env.get(HYBRIDEP_DOMAIN_ENV)
    if (cfg.get("dispatcher") == "hybridep" and HYBRIDEP_DOMAIN_ENV in recipe_env
            and HYBRIDEP_DOMAIN_ENV not in environ and not _domain_divides(value, group)):
        del recipe_env[HYBRIDEP_DOMAIN_ENV]
        lines.append(f"MBRIDGE_HYBRIDEP dropped the recipe's {HYBRIDEP_DOMAIN_ENV}={value!r}: it does not divide the "
                     f"HybridEP group of {group} ranks (etp x ep), so HybridEPBuffer would assert; DeepEP detects the "
                     "NVLink domain itself")
    applied = sorted(name for name in recipe_env if name not in environ)
    kept = sorted(name for name in recipe_env if name in environ)
    lines.append("MBRIDGE_RECIPE_ENV sets=" + (",".join(f"{n}={recipe_env[n]}" for n in applied) or "none")
                 + " environment_wins=" + (",".join(kept) or "none"))
    return lines


def dispatcher_class_name(cls_name: str | None, config_type: str) -> str:
    """The built dispatcher from the first MoE layer's token_dispatcher class, else from the config's type."""
    if cls_name is None:
        return config_type
    return DISPATCHER_CLASSES.get(cls_name, cls_name)


def first_dispatcher_class(*modules: Any) -> str | None:
    """Class name of the first MoE layer's token_dispatcher in these torch modules (None without MoE layers)."""
    for root in modules:
        for module in root.modules():
            dispatcher = getattr(module, "token_dispatcher", None)
            if dispatcher is not None:
                return type(dispatcher).__name__
    return None


def dispatcher_line(requested: str, built: str, backend: str) -> str:
    return f"MBRIDGE_DISPATCHER requested={requested} built={built} backend={backend}"


def built_backend(built: str, flex_backend: Any) -> str:
    return str(flex_backend) if built == "flex" and flex_backend else "none"


def check_dispatcher(requested: str, built: str, backend: str) -> None:
    expected = EXPECTED_DISPATCH[requested]
    if (built, backend) != expected:
        raise DispatcherError(
            f"dispatcher downgraded: requested {requested} (expects {expected[0]}/{expected[1]}) but the built model "
            f"uses {built}/{backend}; a dispatcher A/B with a silently changed dispatcher is invalid. Megatron-Bridge "
            "falls back when the GPU is not on its DeepEP/HybridEP/NCCL EP allowlist, or when it does not know the "
            "backend (ncclep before Megatron-Bridge 0.6.2)."
        )
