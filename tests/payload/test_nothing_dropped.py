"""Issue 31 item 4, "nothing accepted and then dropped": every field a training test can set either changes what the
payload hands Megatron-Bridge / Megatron-Core, or the point is refused or warned with the field named -- for every
dispatcher, engine and Megatron-Bridge release.

The fields come from ``MBridgeTrainingCmdArgs.model_fields``, so a field added later without an entry in ``PROBES``
or ``NOT_FOR_MEGATRON`` fails ``test_every_field_is_probed`` until someone says where it goes.

"What Megatron sees" is built from the payload's own functions, not re-typed: for engine "bridge" the ConfigContainer
overrides (``bridge_overrides``) plus the inputs of the steps that call Bridge (recipe, layout, dispatcher backend,
precision preset, dataset, entry point; ``bridge.build_container`` / ``bridge.run``); for engine "mcore" the
TransformerConfig keyword arguments (``mcore_transformer_kwargs``) plus the keys the loop reads (``mcore._train``).
Megatron-Bridge is not installed here (it needs Transformer Engine), so its own functions are not called.
"""

from __future__ import annotations

import itertools
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from cloudai.core import TestRun

from cloudai_mbridge.catalog.bridge import BRIDGE_RELEASES
from cloudai_mbridge.payload.train import config as tc
from cloudai_mbridge.payload.train.mcore import learning_rate, mcore_transformer_kwargs
from cloudai_mbridge.plan import DISPATCHERS
from cloudai_mbridge.workloads.training.test_definition import MBridgeTrainingCmdArgs, MBridgeTrainingTestDefinition

ENGINES = ("bridge", "mcore")
RELEASES = tuple(BRIDGE_RELEASES)
# A point every engine, dispatcher and release can run (H100: every flex backend's allowlist; a proxy with a shared
# expert and an MTP layer, so that the fields about them have something to change).
BASE: dict[str, Any] = {"model": "deepseek_v3_proxy", "gpu": "h100", "ep": 2, "gbs": 8}
NODES = 1

# Fields that are not Megatron settings, and where they go instead.
NOT_FOR_MEGATRON = {
    "gpu": "selects the catalog GPU the rules and the memory estimate describe; the system's GPU wins (resolve_gpu)",
    "network": "the job's fabric environment (launch/training.py network_env) and the network rules",
    "container_image": "the image the job runs in (launch)",
    "bridge_version": "which release's rules apply (catalog/bridge.py); the container decides what runs",
    "golden_values": "CloudAI's verdict on the finished run (workloads/reporting.py)",
    "golden_thresholds": "CloudAI's verdict on the finished run (workloads/reporting.py)",
    "memory_check": "what the memory rule does with a point (plan/memory.py); recorded in the config's memory key",
    "expected_rejections": "which rules' refusals are intended (workloads/base.py)",
    "engine": "which loop runs: probed by running every field under both engines here",
    # a separate conversion step before training (workloads/training/slurm.py, kubernetes.py), only for SFT: probed
    # in test_conversion_is_warned_where_it_does_not_run
    "convert_checkpoint": "the conversion step before an SFT run (workloads/training/slurm.py, kubernetes.py)",
    "hang_timeout_s": "the payload's progress watchdog (payload/train/watchdog.py), reaches the config: "
                      "tests/test_hang_timeout_field.py",
}

# field -> [(other fields the probe needs on both sides, the probed value[, the value it is compared with; default:
# the field's default])]. Literal and bool fields need no entry: every other allowed value is probed.
PROBES: dict[str, list[tuple[Any, ...]]] = {
    "model": [({}, "kimi_k2_proxy")],
    "tp": [({}, 2)],
    "pp": [({}, 2)],
    "vp": [({"pp": 2}, 2)],
    "cp": [({}, 2)],
    "ep": [({}, 4)],
    "etp": [({}, 2)],
    "mbs": [({"gbs": 16}, 2)],  # gbs 8 is not a multiple of mbs 2 x dp 8: the probe would only ever be refused
    "gbs": [({}, 16)],
    "seq_length": [({}, 2048)],
    "train_iters": [({}, 10)],
    # paged stash hands HybridEP the factor (payload/train/config.py rank_capacity_factor): it must reach Megatron
    # there and not be called unused
    "moe_expert_rank_capacity_factor": [({}, 2.0),
                                        ({"moe_paged_stash": True, "use_transformer_engine_op_fuser": True}, 2.0, 1.5)],
    # unset is the recipes' choice, so each explicit value is compared with the other one
    "moe_shared_expert_overlap": [({}, False, True), ({}, True, False)],
    "recompute_modules": [({"recompute": "selective"}, "moe,mlp"), ({}, "moe")],
    "cuda_graph_scope": [({"cuda_graph_impl": "transformer_engine"}, "attn"), ({}, "attn")],
    "echo": [({}, {"num_echo_experts": 2})],
    "pipeline_layout": [({"pp": 2}, "Et|t*3,mL"), ({}, "Et*4,mL")],
    "mtp_num_layers": [({}, 0), ({}, 2)],
    "sequence_parallel": [({"tp": 2}, False)],  # see ONLY_REFUSED
    # each of these is accepted only beside the fields it needs (the rules say which): probed there, so that a payload
    # that stops handing it over fails here instead of every probe ending in a refusal that proves nothing
    "outer_dp_sharding_strategy": [({"use_megatron_fsdp": True, "num_distributed_optimizer_instances": 2}, "optim")],
    "fp8_dot_product_attention": [({"precision": "fp8_tensorwise"}, True)],
    "fp8_output_proj": [({"gpu": "b200", "precision": "mxfp8"}, True)],
    "delay_wgrad_compute": [({"moe_a2a_overlap": True}, True)],
    "data": [({}, "/data/tokens_text_document")],
    "hf_model_id": [({}, "deepseek-ai/DeepSeek-V3"), ({"task": "sft", "data": "/data/sft"}, "/models/other")],
    "hf_config_dir": [({}, "/models/dsv3_proxy")],
    "checkpoint_dir": [({}, "/ckpt/a"), ({"task": "sft"}, "/ckpt/b")],
    "seed": [({}, 7)],
    "log_interval": [({}, 2)],
    "num_distributed_optimizer_instances": [({}, 2)],
    "offload_modules": [({}, "core_attn")],
    "fine_grained_offloading_max_inflight_offloads": [({"offload_modules": "core_attn"}, 1), ({}, 1)],
    "num_layers_in_first_pipeline_stage": [({"pp": 2}, 2), ({}, 2)],
    "use_precision_aware_optimizer": [({}, True), ({}, False)],
    "cuda_graph_warmup_steps": [({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": "attn"}, 0), ({}, 0)],
    "num_layers_in_last_pipeline_stage": [({"pp": 2}, 2), ({}, 2)],
    "optimizer_offload_fraction": [({"optimizer_cpu_offload": True}, 0.5), ({}, 0.5)],
    "lr": [({}, 1e-5)],
}
# Fields with no value other than the default that any point accepts and that could reach Megatron: their probes can
# only show the refusal. Every other field needs a probe point that is accepted.
ONLY_REFUSED = {
    "offload_optimizer_states": "Megatron-LM moe_dev's flag, in no released Megatron-Core: accepted only to be refused "
                                "by name (rule offload-optimizer-states)",
    "sequence_parallel": "default true; false with tp > 1 is refused for MoE (moe-tp-sequence-parallel), and at tp = 1 "
                         "there is no sequence parallelism to turn off (the payload hands Megatron false either way: "
                         "model_parallel_config.py __post_init__ raises 'Cannot use sequence parallelism without "
                         "tensor parallelism')",
}
SFT_NEEDS = {"checkpoint_dir": "/ckpt/base"}  # an SFT point is refused without it (payload check_config)


def _literal_values(annotation: Any) -> list[Any] | None:
    """Every value of a Literal (or of a ``Literal | list[Literal]`` sweep type), or None for another type."""
    found: list[Any] = []
    for arg in typing.get_args(annotation) or ():
        if typing.get_origin(arg) is typing.Literal:
            found += [v for v in typing.get_args(arg) if v not in found]
    if typing.get_origin(annotation) is typing.Literal:
        found = list(typing.get_args(annotation))
    return found or None


def _is_bool(annotation: Any) -> bool:
    """bool, StrictBool (Annotated[bool, ...]) or a sweep of them (``Bool | list[Bool]``)."""
    if annotation is bool:
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_bool(typing.get_args(annotation)[0])
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and any(
        _is_bool(a) for a in typing.get_args(annotation))


def probes(name: str) -> list[tuple[Any, ...]]:
    if name in PROBES:
        return PROBES[name]
    info = MBridgeTrainingCmdArgs.model_fields[name]
    values = _literal_values(info.annotation)
    if values is not None:
        return [({}, v) for v in values if v != info.default]
    if _is_bool(info.annotation):
        return [({}, not info.default)]
    return []


def point(args: dict[str, Any]) -> tuple[MBridgeTrainingTestDefinition, TestRun]:
    tdef = MBridgeTrainingTestDefinition.model_validate(
        {"name": "p", "description": "d", "test_template_name": "MBridgeTraining", "cmd_args": args})
    tr = TestRun(name="p", test=tdef, num_nodes=NODES, nodes=[], output_path="/nonexistent/out",
                 time_limit="01:00:00")
    return tdef, tr


def bridge_view(cfg: dict[str, Any]) -> dict[str, Any]:
    """What engine "bridge" hands Megatron-Bridge for this config (payload/train/bridge.py build_container, run)."""
    source, layout = tc.pipeline_layout(cfg)
    sft_text = cfg["task"] == "sft" and cfg["data"] != "mock"
    return {
        "overrides": tc.bridge_overrides(cfg),  # set_fields(container, bridge_overrides(cfg))
        "recipe": (tc.bridge_recipe(cfg, True), tc.bridge_recipe(cfg, False), cfg["optimizer"]),  # _recipe_container
        "layout": (source, layout, cfg["pp"], cfg["vp"], tc.megatron_mtp_layers(cfg)),  # _apply_layout
        "dispatcher": cfg["dispatcher"],  # _apply_dispatcher -> apply_flex_dispatcher_backend
        # check_deep_ep: the DeepEP kind is checked for the deepep backend only
        "deepep_impl": cfg["deepep_impl"] if cfg["dispatcher"] == "deepep" else None,
        "precision": tc.BRIDGE_PRECISION_RECIPES[cfg["precision"]],  # _apply_precision
        # _apply_data: the dataset (and, for SFT on text, the tokenizer from hf_model_id)
        "data": (cfg["task"], cfg["data"], cfg["seq_length"], cfg["seed"], cfg["hf_model_id"] if sft_text else None),
        "model_dir": cfg["hf_config_dir"],  # hf_config.prepare: the folder the provider is built from
        "entry": cfg["task"],  # finetune or pretrain
    }


def mcore_view(cfg: dict[str, Any]) -> dict[str, Any]:
    """What engine "mcore" hands Megatron-Core (payload/train/mcore.py run, _train)."""
    return {
        "transformer_config": {mla: mcore_transformer_kwargs(cfg, mla=mla) for mla in (True, False)},
        "loop": {k: cfg[k] for k in ("mbs", "gbs", "seq_length", "train_iters", "log_interval", "seed", "tp", "pp",
                                     "cp", "ep", "etp", "use_distributed_optimizer", "rank_order")},
        "deepep_impl": cfg["deepep_impl"] if cfg["dispatcher"] == "deepep" else None,  # check_deep_ep
        "lr": learning_rate(cfg),  # OptimizerConfig(lr=, min_lr=)
    }


VIEWS = {"bridge": bridge_view, "mcore": mcore_view}


def outcome(args: dict[str, Any]) -> tuple[list[str], list[str], dict[str, Any] | None]:
    """(refusals, warnings, what Megatron sees) for one point; the view is None when the point is refused."""
    tdef, tr = point(args)
    refusals = [str(v) for v in tdef.violations(tr, None)]
    warnings = tdef.cautions(tr, None)
    if refusals:
        return refusals, warnings, None
    cfg = tdef.payload_config(tr, None, "/nonexistent/out")
    try:
        cfg = tc.check_config(cfg)
    except tc.ConfigError as e:
        return [str(e)], warnings, None
    if args.get("engine") == "mcore" and tc.mcore_unsupported(cfg):
        return tc.mcore_unsupported(cfg), warnings, None
    return refusals, warnings, VIEWS[args["engine"]](cfg)


def combos() -> list[tuple[str, str, str]]:
    return list(itertools.product(ENGINES, DISPATCHERS, RELEASES))


def _base(engine: str, dispatcher: str, release: str, extra: dict[str, Any]) -> dict[str, Any]:
    args = {**BASE, "engine": engine, "dispatcher": dispatcher, "bridge_version": release, **extra}
    if dispatcher == "ncclep":
        args.setdefault("moe_expert_rank_capacity_factor", 1.5)
    if args.get("task") == "sft":
        args = {**SFT_NEEDS, **args}
    return args


def probe_points(name: str) -> Iterator[tuple[dict[str, Any], Any, str]]:
    """(the point without the probed value, the value, where that is in words) for every engine, dispatcher, release
    and probe of ``name``, skipping a probe whose point already has the value."""
    for (engine, dispatcher, release), (extra, value, *reference) in itertools.product(combos(), probes(name)):
        base = _base(engine, dispatcher, release, {**extra, **({name: reference[0]} if reference else {})})
        if base.get(name) != value:
            yield base, value, (f"{name} = {value!r} (engine {engine}, dispatcher {dispatcher}, bridge_version "
                                f"{release}{', with ' + repr(extra) if extra else ''})")


def dropped(name: str) -> tuple[list[str], int]:
    """Every (engine, dispatcher, release, value) where setting ``name`` is accepted without a word and changes
    nothing the payload hands Megatron; and how many probe points were accepted at all (0: the probes prove nothing,
    every one ends in a refusal)."""
    found = []
    accepted = 0
    for base, value, where in probe_points(name):
        base_refusals, _, base_view = outcome(base)
        if base_refusals:
            continue  # the point is refused without the field: nothing to compare
        changed = {**base, name: value}
        if name == "task" and value == "sft":
            changed = {**SFT_NEEDS, **changed}
        refusals, warnings, view = outcome(changed)
        accepted += not refusals
        if any(name in text for text in refusals + warnings):
            continue  # refused or warned, the field named
        if refusals:
            continue  # refused for another field the probe changed with it (e.g. vp needs pp): not silent
        if view != base_view:
            continue  # it reached Megatron
        found.append(where)
    return found, accepted


def unused_but_used(name: str) -> list[str]:
    """Every (engine, dispatcher, release, value) where a caution calls ``name`` unused ("... is not used ...") while
    the value does change what the payload hands Megatron: a false warning a user would act on."""
    found = []
    for base, value, where in probe_points(name):
        base_refusals, _, base_view = outcome(base)
        refusals, warnings, view = outcome({**base, name: value})
        if base_refusals or refusals or not any(f"{name} = " in w and "is not used" in w for w in warnings):
            continue
        if view != base_view:
            found.append(where)
    return found


def test_every_field_is_probed() -> None:
    """A new field must say where it reaches Megatron (PROBES, or a Literal / bool type) or why it does not."""
    unprobed = [n for n in MBridgeTrainingCmdArgs.model_fields if n not in NOT_FOR_MEGATRON and not probes(n)]
    assert not unprobed, f"fields with no probe: {unprobed}; add them to PROBES or NOT_FOR_MEGATRON"
    stale = [n for n in [*PROBES, *NOT_FOR_MEGATRON] if n not in MBridgeTrainingCmdArgs.model_fields]
    assert not stale, stale


@pytest.mark.parametrize("name", [n for n in MBridgeTrainingCmdArgs.model_fields if n not in NOT_FOR_MEGATRON])
def test_no_field_is_silently_dropped(name: str) -> None:
    found, accepted = dropped(name)
    assert not found, "accepted, then not handed to Megatron, without a word:\n" + "\n".join(found)
    assert accepted or name in ONLY_REFUSED, (
        f"every probe point of {name} is refused, so nothing here shows it reaching Megatron: give it a PROBES entry "
        "with the fields it needs")


@pytest.mark.parametrize("name", ["moe_expert_rank_capacity_factor", "deepep_impl", "recompute_modules",
                                  "checkpoint_dir", "hf_model_id", "data_parallel_sharding_strategy"])
def test_a_field_called_unused_changes_nothing_megatron_sees(name: str) -> None:
    """The reverse: the fields unused_fields can name are said to be unused only where they change nothing."""
    assert not unused_but_used(name), "called unused, yet handed to Megatron:\n" + "\n".join(unused_but_used(name))


def test_conversion_is_warned_where_it_does_not_run() -> None:
    """convert_checkpoint adds a conversion step for SFT only; on a pretraining point it would do nothing."""
    for engine in ENGINES:
        _, warnings, _ = outcome({**BASE, "engine": engine, "convert_checkpoint": True, "checkpoint_dir": "/ckpt"})
        assert any("convert_checkpoint" in w for w in warnings), (engine, warnings)
