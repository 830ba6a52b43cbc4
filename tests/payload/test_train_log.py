"""The lines the payload prints for others to read: Megatron-LM's iteration and memory lines, byte for byte, and the
MBRIDGE_DISPATCHER / MBRIDGE_DEEP_EP lines with the DeepEP provider detection (on stand-ins shaped like the real
UCCL-EP shadow and NVIDIA DeepEP packages)."""

from __future__ import annotations

import types
from datetime import datetime

import pytest
import torch

from cloudai_mbridge.payload.train import log as tl


def test_iteration_line_is_megatron_lms():
    # A line as Megatron-LM core_v0.16.1 training_log prints it (print_rank_last), written out by hand.
    expected = (
        " [2026-06-04 08:31:02.123456] iteration        5/      24 | consumed samples:         1280 |"
        " elapsed time per iteration (ms): 3834.2 | throughput per GPU (TFLOP/s/GPU): 218.5 |"
        " learning rate: 3.000000E-04 | global batch size:   256 | lm loss: 1.189735E+01 |"
        " seq_load_balancing_loss: 1.000417E+00 | mtp_1 loss: 1.190021E+00 | loss scale: 1.0 | grad norm: 12.346 |"
        " number of skipped iterations:   0 | number of nan iterations:   0 |"
    )
    line = tl.iteration_line(
        timestamp=datetime(2026, 6, 4, 8, 31, 2, 123456), iteration=5, train_iters=24, consumed_samples=1280,
        elapsed_time_per_iteration=3.83416, throughput=218.4505, learning_rate=3e-4, batch_size=256,
        losses={"lm loss": 11.897349, "load_balancing_loss": 0.0, "seq_load_balancing_loss": 1.0004171,
                "mtp_1 loss": 1.190021},
        loss_scale=1.0, grad_norm=12.34567, skipped_iterations=0, nan_iterations=0,
    )
    assert line == expected


def test_iteration_line_optional_fields():
    line = tl.iteration_line(
        timestamp=datetime(2026, 1, 2, 3, 4, 5), iteration=123456789, train_iters=123456789,
        consumed_samples=5, elapsed_time_per_iteration=0.01, throughput=None, learning_rate=0.0, batch_size=123456,
        losses={}, loss_scale=65536.0, grad_norm=None, skipped_iterations=1000, nan_iterations=2, skipped_samples=7,
    )
    assert line == (
        " [2026-01-02 03:04:05.000000] iteration 123456789/123456789 | consumed samples:            5 |"
        " skipped samples:            7 | elapsed time per iteration (ms): 10.0 | learning rate: 0.000000E+00 |"
        " global batch size: 123456 | loss scale: 65536.0 | number of skipped iterations: 1000 |"
        " number of nan iterations:   2 |"
    )


def test_memory_line_is_megatron_lms():
    mb = 1024 * 1024
    line = tl.memory_line(rank=7, iteration=1, allocated=1536 * mb, max_allocated=int(20480.5 * mb),
                          reserved=22000 * mb, max_reserved=22000 * mb + 1)
    assert line == ("[Rank 7] (after 1 iterations) memory (MB) | allocated: 1536.00 | max allocated: 20480.50 |"
                    " reserved: 22000.00 | max reserved: 22000.00")


def test_device_memory_line_reads_back_in_the_memory_benchmark(tmp_path):
    mb = 1024 * 1024
    line = tl.device_memory_line(rank=0, iteration=2, free=100_000 * mb, total=143_771 * mb, reserved=42_000 * mb)
    assert line == ("MBRIDGE_DEVICE_MEMORY rank=0 iteration=2 used_mib=43771.00 total_mib=143771.00 "
                    "reserved_mib=42000.00 outside_allocator_mib=1771.00 stage=report")
    import gpu_memory  # benchmarks/ is on pytest's pythonpath

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank-0.log").write_text(f"noise\n{line}\n")
    (report,) = gpu_memory.device_memory_reports(tmp_path)
    assert (report["after"], report["outside_allocator"], report["used"]) == (2, 1771 * mb, 43771 * mb)


def _module(name: str, file: str | None, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    if file is not None:
        mod.__file__ = file
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def _cls(name: str, module: str) -> type:
    return type(name, (), {"__module__": module})


# uccl-project/uccl ep/deep_ep_wrapper/deep_ep/__init__.py: `from uccl.ep import Config, EventHandle`, plus
# Buffer, EventOverlap, initialize_uccl, destroy_uccl; `python setup.py install` puts it in site-packages/deep_ep.
UCCL = _module("deep_ep", "/opt/venv/lib/python3.12/site-packages/deep_ep/__init__.py",
               Config=_cls("Config", "uccl.ep"), EventHandle=_cls("EventHandle", "uccl.ep"),
               Buffer=_cls("Buffer", "deep_ep.buffer"), initialize_uccl=lambda: None, destroy_uccl=lambda: None)
# NVIDIA DeepEP (hybrid-ep branch): Buffer, HybridEPBuffer, Config from the deep_ep_cpp extension.
NVIDIA = _module("deep_ep", "/usr/local/lib/python3.12/dist-packages/deep_ep/__init__.py",
                 Config=_cls("Config", "deep_ep_cpp"), Buffer=_cls("Buffer", "deep_ep.buffer"),
                 HybridEPBuffer=_cls("HybridEPBuffer", "deep_ep.hybrid_ep_buffer"))
NVIDIA_NO_HYBRID = _module("deep_ep", "/usr/local/lib/python3.12/dist-packages/deep_ep/__init__.py",
                           Config=_cls("Config", "deep_ep_cpp"), Buffer=_cls("Buffer", "deep_ep.buffer"))


@pytest.mark.parametrize(("module", "provider"), [
    (UCCL, "uccl"), (NVIDIA, "nvidia"), (NVIDIA_NO_HYBRID, "nvidia"), (None, "none"),
    (_module("deep_ep", "/x/uccl/deep_ep/__init__.py"), "uccl"), (_module("deep_ep", None), "unknown"),
])
def test_deep_ep_provider(module, provider):
    assert tl.deep_ep_provider(module) == provider


def test_deep_ep_line():
    assert tl.deep_ep_line(UCCL) == (
        "MBRIDGE_DEEP_EP module=/opt/venv/lib/python3.12/site-packages/deep_ep/__init__.py provider=uccl")
    assert tl.deep_ep_line(None) == "MBRIDGE_DEEP_EP module=none provider=none"


def test_deep_ep_is_not_installed_here():
    module, error = tl.import_deep_ep()
    assert module is None and error.startswith("ModuleNotFoundError")


def test_check_deep_ep():
    tl.check_deep_ep("alltoall", "uccl", None, "ModuleNotFoundError: no deep_ep")
    tl.check_deep_ep("deepep", "uccl", UCCL, None)
    tl.check_deep_ep("deepep", None, NVIDIA, None)
    tl.check_deep_ep("hybridep", "uccl", NVIDIA, None)  # deepep_impl only labels the DeepEP arm
    with pytest.raises(tl.DispatcherError, match=r"needs the deep_ep module.*ModuleNotFoundError"):
        tl.check_deep_ep("deepep", "nvidia", None, "ModuleNotFoundError: no deep_ep")
    with pytest.raises(tl.DispatcherError, match="HybridEPBuffer"):
        tl.check_deep_ep("hybridep", None, UCCL, None)
    with pytest.raises(tl.DispatcherError, match="deepep_impl = 'uccl' but `import deep_ep` gives the nvidia one"):
        tl.check_deep_ep("deepep", "uccl", NVIDIA, None)
    # NCCL EP is Transformer Engine's: no deep_ep needed (payload/train/nccl_ep.py checks TE's module)
    tl.check_deep_ep("ncclep", "uccl", None, "ModuleNotFoundError: no deep_ep")


@pytest.mark.parametrize(("requested", "built", "backend"), [
    ("alltoall", "alltoall", "none"), ("deepep", "flex", "deepep"), ("hybridep", "flex", "hybridep"),
    ("ncclep", "flex", "ncclep"),
])
def test_dispatcher_as_requested(requested, built, backend):
    tl.check_dispatcher(requested, built, backend)
    assert tl.dispatcher_line(requested, built, backend) == (
        f"MBRIDGE_DISPATCHER requested={requested} built={built} backend={backend}")


@pytest.mark.parametrize(("requested", "built", "backend"), [
    ("deepep", "alltoall", "none"),  # Bridge's GPU allowlist skipped the flex backend
    ("deepep", "flex", "hybridep"),  # the recipe's default backend survived
    ("hybridep", "allgather", "none"),
    ("alltoall", "flex", "deepep"),
    ("ncclep", "alltoall", "none"),  # Bridge < 0.6.2 does not know the backend, or the GPU is off its allowlist
    ("ncclep", "flex", "deepep"),
])
def test_dispatcher_downgrade_stops_the_run(requested, built, backend):
    with pytest.raises(tl.DispatcherError, match="dispatcher downgraded"):
        tl.check_dispatcher(requested, built, backend)


def test_built_dispatcher_from_the_model():
    flex = type("MoEFlexTokenDispatcher", (), {})

    class MoELayer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.token_dispatcher = flex()

    dense = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(MoELayer()))
    assert tl.first_dispatcher_class(dense) is None
    assert tl.first_dispatcher_class(dense, model) == "MoEFlexTokenDispatcher"
    assert tl.dispatcher_class_name("MoEFlexTokenDispatcher", "alltoall") == "flex"
    assert tl.dispatcher_class_name("MoEAlltoAllTokenDispatcher", "flex") == "alltoall"
    assert tl.dispatcher_class_name(None, "alltoall") == "alltoall"
    assert tl.built_backend("flex", "deepep") == "deepep"
    assert tl.built_backend("alltoall", "deepep") == "none"  # Megatron-Core's field default, unused


# NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN: what 4 x H200 met (2026-11-28): 8 inherited from the host, a HybridEP
# group of 4 ranks, and HybridEPBuffer's assertion on every rank at the first dispatch.
@pytest.mark.parametrize(("value", "etp", "ep", "removed"), [
    ("8", 1, 4, True),     # the host's 8 on a 4-rank group: HybridEPBuffer would assert
    ("3", 2, 4, True),     # does not divide 8
    ("x", 1, 4, True),     # not a number
    ("0", 1, 4, True),
    ("4", 1, 4, False),    # equal to the group
    ("8", 2, 8, False),    # a smaller domain than the group, dividing it: a user's choice (Bridge's GB200 recipes)
])
def test_an_inherited_hybridep_domain_that_cannot_divide_the_group_is_removed(value, etp, ep, removed):
    environ = {tl.HYBRIDEP_DOMAIN_ENV: value, "OTHER": "kept"}
    line = tl.hybridep_domain_env({"dispatcher": "hybridep", "etp": etp, "ep": ep}, environ)
    assert (tl.HYBRIDEP_DOMAIN_ENV not in environ) is removed
    assert environ["OTHER"] == "kept"
    if removed:
        assert line.startswith("MBRIDGE_HYBRIDEP unset ")
        assert repr(value) in line and f"group of {etp * ep} ranks" in line
    else:
        assert line is None and environ[tl.HYBRIDEP_DOMAIN_ENV] == value


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep", "ncclep"])
def test_the_hybridep_domain_variable_is_left_alone_for_other_dispatchers(dispatcher):
    environ = {tl.HYBRIDEP_DOMAIN_ENV: "8"}
    assert tl.hybridep_domain_env({"dispatcher": dispatcher, "etp": 1, "ep": 4}, environ) is None
    assert environ == {tl.HYBRIDEP_DOMAIN_ENV: "8"}
    assert tl.hybridep_domain_env({"dispatcher": "hybridep", "etp": 1, "ep": 4}, {}) is None


# Megatron-Bridge 0.6.2's DeepSeek-V3 H100 recipes (recipes/deepseek/h100/deepseek_v3.py L243-L252) carry these in
# ConfigContainer.env_vars, applied with os.environ.setdefault when pretrain starts. What 2 x H200 met (2026-11-29,
# `cloudai run`, ep 2): the job's environment had no NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN, DeepEP detected 2, and
# the recipe's 8 made every hybridep start die at its first dispatch.
DSV3_H100_RECIPE_ENV = {"NCCL_GRAPH_REGISTER": 0, "NCCL_NVLS_ENABLE": 0,
                        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCH_NCCL_AVOID_RECORD_STREAMS": 1,
                        "TORCH_NCCL_HIGH_PRIORITY": 1, "NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
                        "NVTE_FWD_LAYERNORM_SM_MARGIN": 20, tl.HYBRIDEP_DOMAIN_ENV: 8, "NVLINK_DOMAIN_SIZE": 8,
                        "USE_MNNVL": 0}


@pytest.mark.parametrize(("dispatcher", "etp", "ep", "dropped"), [
    ("hybridep", 1, 2, True),    # 2 x H200: 8 does not divide a 2-rank group
    ("hybridep", 1, 4, True),
    ("hybridep", 2, 4, False),   # 8 divides 8: the recipe's value stands
    ("hybridep", 1, 16, False),  # two 8-GPU domains
    ("alltoall", 1, 2, False),   # no HybridEP buffer is built: nothing to change
])
def test_a_recipe_hybridep_domain_that_cannot_divide_the_group_is_dropped(dispatcher, etp, ep, dropped):
    recipe_env = dict(DSV3_H100_RECIPE_ENV)
    lines = tl.recipe_env_lines({"dispatcher": dispatcher, "etp": etp, "ep": ep}, recipe_env, {"NCCL_NVLS_ENABLE": "0"})
    assert (tl.HYBRIDEP_DOMAIN_ENV not in recipe_env) is dropped
    assert len(recipe_env) == len(DSV3_H100_RECIPE_ENV) - dropped  # nothing else is touched
    if dropped:
        assert lines[0].startswith(f"MBRIDGE_HYBRIDEP dropped the recipe's {tl.HYBRIDEP_DOMAIN_ENV}=8:")
        assert f"group of {etp * ep} ranks" in lines[0]
    else:
        assert not any(line.startswith("MBRIDGE_HYBRIDEP") for line in lines)
    # The last line says what the recipe will set and which of its variables the environment overrides.
    assert lines[-1].startswith("MBRIDGE_RECIPE_ENV sets=")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in lines[-1]
    assert lines[-1].endswith(" environment_wins=NCCL_NVLS_ENABLE")
    assert (f"{tl.HYBRIDEP_DOMAIN_ENV}=8" in lines[-1]) is not dropped


def test_the_environment_wins_over_the_recipe_and_bridge_04_has_no_recipe_env():
    # A usable value in the job's environment is what Bridge's setdefault keeps: the recipe's is left alone (and the
    # environment's value is not printed).
    recipe_env = dict(DSV3_H100_RECIPE_ENV)
    lines = tl.recipe_env_lines({"dispatcher": "hybridep", "etp": 1, "ep": 2}, recipe_env,
                                {tl.HYBRIDEP_DOMAIN_ENV: "2"})
    assert recipe_env == DSV3_H100_RECIPE_ENV
    assert len(lines) == 1 and lines[0].endswith(f"environment_wins={tl.HYBRIDEP_DOMAIN_ENV}")
    assert tl.recipe_env_lines({"dispatcher": "hybridep", "etp": 1, "ep": 2}, None, {}) == []
    assert tl.recipe_env_lines({"dispatcher": "hybridep", "etp": 1, "ep": 2}, {}, {}) == []
