"""Engine "bridge": Megatron-Bridge's recipe ConfigContainer with every field of the sweep point applied, then
pretrain() or finetune() with Bridge's GPT forward step.

The recipe is the model family's (recipes/deepseek/deepseek_v3.py); Kimi-K2 uses recipes/kimi/kimi_k2.py where
Bridge ships it, otherwise its provider comes from AutoBridge (hf_model_id, trust_remote_code) grafted onto the
DeepSeek-V3 recipe's scaffolding, as the seed benchmark did. Proxies take the DeepSeek-V3 recipe with the catalog's
shapes. What is set is `train_config.bridge_overrides(cfg)` plus the pieces that need Bridge's own functions: the
flex dispatcher backend (apply_flex_dispatcher_backend, which knows Bridge's GPU allowlist), the recipe's mtp-aware
(PP, VP) layout table, the mixed-precision preset and the dataset object.

After the model is built (the on_train_start callback) rank 0 prints MBRIDGE_DISPATCHER / MBRIDGE_DEEP_EP and every
rank stops if the built dispatcher is not the requested one.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import os
import tempfile
from typing import Any

from .. import dist_env, hf_config
from . import watchdog
from .config import (
    BRIDGE_PRECISION_RECIPES,
    FUSION_NEEDS,
    IDENTITY_FIELDS,
    ConfigError,
    bridge_overrides,
    bridge_recipe,
    catalog_shape,
    fusion_fallbacks,
    lr_line,
    megatron_mtp_layers,
    missing_echo_fields,
    pipeline_layout,
    trust_remote_code,
    with_mtp_tail,
)
from .dispatch_timing import DispatcherTimer, timing_fields
from .log import (
    built_backend,
    check_deep_ep,
    check_dispatcher,
    deep_ep_line,
    dispatcher_class_name,
    dispatcher_line,
    first_dispatcher_class,
    hybridep_domain_env,
    import_deep_ep,
    recipe_env_lines,
)
from .nccl_ep import nccl_ep_topk, prepare_nccl_ep
from .routing import RoutingHash, routing_line

KIMI_RECIPE = "megatron.bridge.recipes.kimi.kimi_k2"
# DeepSeek-V3 recipe settings that are not architecture: kept when Kimi-K2's AutoBridge provider replaces the model.
GRAFT_FIELDS = (
    "pipeline_dtype", "init_method_std", "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split", "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
    "moe_hybridep_num_sms", "transformer_impl", "cuda_graph_warmup_steps", "attention_backend", "moe_router_fusion",
    "moe_permute_fusion", "moe_grouped_gemm", "cross_entropy_loss_fusion", "cross_entropy_fusion_impl",
    "fine_grained_activation_offloading", "offload_modules", "moe_router_padding_for_fp8", "mtp_loss_scaling_factor",
)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def available() -> bool:
    return _importable("megatron.bridge")


def _kimi_recipe_available() -> bool:
    return _importable(KIMI_RECIPE)


def set_fields(container: Any, overrides: dict[str, Any]) -> None:
    """Set dotted fields on the ConfigContainer; a field the installed Bridge does not have is an error, not a new
    attribute nobody reads (its dataclasses would accept one silently)."""
    for path, value in overrides.items():
        *parents, leaf = path.split(".")
        owner = container
        for name in parents:
            owner = getattr(owner, name, None)
            if owner is None:
                raise ConfigError(f"cannot set {path}: the ConfigContainer has no {name!r} section here")
        if not hasattr(owner, leaf):
            raise ConfigError(f"cannot set {path}: the installed Megatron-Bridge has no field {leaf!r} there")
        setattr(owner, leaf, value)


def _recipe_container(cfg: dict[str, Any]):
    """The recipe's ConfigContainer. Its literal hub id is served by the private hub cache (hf_config.prepare)."""
    recipe = bridge_recipe(cfg, _kimi_recipe_available())
    if recipe == "kimi_k2":
        kimi = importlib.import_module(KIMI_RECIPE)
        build = kimi.kimi_k2_pretrain_config
        if "optimizer_type" in inspect.signature(build).parameters:  # Bridge 0.4 / 0.5
            return recipe, build(optimizer_type=cfg["optimizer"])
        # Bridge 0.6: the builder takes no optimizer and always configures Muon (recipes/kimi/h100/kimi_k2.py L200);
        # its own _apply_kimi_k2_optimizer switches the optimizer, grad reduction and distributed optimizer together
        apply = getattr(kimi, "_apply_kimi_k2_optimizer", None)
        container = build()
        if apply is not None:
            apply(container, cfg["optimizer"])
            return recipe, container
        if cfg["optimizer"] != "muon":
            raise ConfigError(f"optimizer = {cfg['optimizer']!r}: this Bridge's Kimi-K2 recipe takes no optimizer "
                              "and trains Muon; use optimizer = 'muon' or a Bridge whose recipe takes optimizer_type")
        return recipe, container
    if cfg["optimizer"] != "adam":
        raise ConfigError(
            f"optimizer = {cfg['optimizer']!r}: the DeepSeek-V3 recipe trains with Adam; Muon is wired through "
            "Megatron-Bridge's Kimi-K2 recipe (model kimi_k2) only"
        )
    from megatron.bridge.recipes.deepseek.deepseek_v3 import deepseek_v3_pretrain_config

    return recipe, deepseek_v3_pretrain_config()


def _model_provider(cfg: dict[str, Any], model_dir: str, scaffold: Any):
    """The run's provider, built by Bridge from the run's own config.json (so every field Bridge derives from the
    architecture is this model's), with the recipe's non-architecture settings carried over from its scaffold."""
    from megatron.bridge import AutoBridge

    trust = trust_remote_code(cfg) if cfg["hf_config_dir"] else False  # the catalog's config is transformers-native
    provider = AutoBridge.from_hf_pretrained(model_dir, trust_remote_code=trust).to_megatron_provider(
        load_weights=False
    )
    for name in GRAFT_FIELDS:
        if hasattr(scaffold, name):
            setattr(provider, name, getattr(scaffold, name))
    return provider


def provider_fields(provider: Any) -> dict[str, Any]:
    return {f.name: getattr(provider, f.name, None) for f in dataclasses.fields(provider)}


def changed_fields(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, before, after) for every provider field whose value differs (fields compared by ==, falling back to
    identity for values that cannot be compared)."""
    out = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        try:
            same = bool(old == new)
        except Exception:  # tensors, callables: identity is what we can say
            same = old is new
        if not same:
            out.append((name, old, new))
    return out


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def apply_fusion_fallbacks(model_cfg: Any) -> list[tuple[str, str]]:
    """Switch off the fused kernels whose module is missing here (train_config.FUSION_NEEDS); returns what was."""
    enabled = {name: getattr(model_cfg, name, None) for name, _, _ in FUSION_NEEDS}
    found = fusion_fallbacks(enabled, _importable)
    for name, _ in found:
        setattr(model_cfg, name, False)
    return found


def _check_identity(cfg: dict[str, Any], model_cfg: Any) -> None:
    """A full model's provider comes from its Hugging Face config: it must be the model the catalog (and so the plan's
    rules and memory estimate) describes."""
    expected = catalog_shape(cfg["model"])
    wrong = {k: (getattr(model_cfg, k, None), expected[k]) for k in IDENTITY_FIELDS
             if getattr(model_cfg, k, None) != expected[k]}
    if wrong:
        detail = ", ".join(f"{k} = {got} (catalog {want})" for k, (got, want) in wrong.items())
        raise ConfigError(f"the recipe's provider is not {cfg['model']['name']}: {detail}")


def _apply_layout(cfg: dict[str, Any], model_cfg: Any, recipe: str = "deepseek_v3") -> None:
    """The layout Megatron gets: the test's, the proxy's derived one, or the recipe's own (pp, vp) table -- Kimi-K2's
    recipe has its own (an extra (2, 8) pair; a ValueError for a pair outside it), DeepSeek-V3's another."""
    source, layout = pipeline_layout(cfg)
    model_cfg.pipeline_model_parallel_layout = None
    if source in ("explicit", "derived"):
        model_cfg.pipeline_model_parallel_layout = layout
    elif source == "recipe" and recipe == "kimi_k2":
        kimi = importlib.import_module(KIMI_RECIPE)
        try:
            table = kimi._get_kimi_k2_pipeline_layout(cfg["pp"], cfg["vp"] or 1)
            model_cfg.pipeline_model_parallel_layout = with_mtp_tail(table, megatron_mtp_layers(cfg))
        except ValueError as e:
            raise ConfigError(f"the Kimi-K2 recipe has no pipeline layout for (pp, vp) = ({cfg['pp']}, "
                              f"{cfg['vp'] or 1}): {e}; give an explicit pipeline_layout") from None
    elif source == "recipe":
        from megatron.bridge.recipes.deepseek.deepseek_v3 import set_deepseek_v3_pipeline_model_parallel_layout

        set_deepseek_v3_pipeline_model_parallel_layout(model_cfg)
        if model_cfg.pipeline_model_parallel_layout is None:
            raise ConfigError(
                f"the DeepSeek-V3 recipe has no pipeline layout for (pp, vp) = ({cfg['pp']}, {cfg['vp'] or 1}); "
                "give an explicit pipeline_layout"
            )


def _precision_aware_dtypes(optimizer: Any) -> None:
    """The precision-aware optimizer as the DeepSeek-V3 recipe runs it (Bridge 0.6.2 recipes/deepseek/h100/
    deepseek_v3.py L206-L209) and NVIDIA's Megatron-MoE-ModelZoo passes it (--main-params-dtype fp32 --exp-avg-dtype
    bf16 --exp-avg-sq-dtype bf16): fp32 master parameters, bf16 Adam moments -- what plan/memory.py counts for it.
    A Kimi-K2 recipe keeps fp32 moments with it off; a test that turns it on gets these."""
    import torch

    optimizer.main_params_dtype = torch.float32
    optimizer.exp_avg_dtype = torch.bfloat16
    optimizer.exp_avg_sq_dtype = torch.bfloat16


def _apply_dispatcher(cfg: dict[str, Any], model_cfg: Any) -> None:
    """Start from all-to-all so that a backend Bridge refuses shows up as a downgrade, not as the recipe's default."""
    model_cfg.moe_token_dispatcher_type = "alltoall"
    if cfg["dispatcher"] != "alltoall":
        from megatron.bridge.training.flex_dispatcher_backend import apply_flex_dispatcher_backend

        apply_flex_dispatcher_backend(model_cfg, cfg["dispatcher"])


# Muon trains with a non-distributed optimizer whose step would copy MXFP8 parameters into a gather buffer only
# DistributedOptimizer has (Megatron-Core 0.17.1 optimizer/optimizer.py L580-L584, distrib_optimizer.py L2550): the
# MXFP8 preset's param gather and gradient-buffer reuse are switched off for it, as upstream does (Bridge 0.4.2
# scripts/performance/configs/kimi/kimi_llm_pretrain.py L38-L44; 0.6.2 perf_recipes/kimi/<gpu>/kimi_k2.py, e.g.
# gb300 L142-L143). The rule muon-mxfp8-param-gather refuses a test that asks for the gather with Muon.
MUON_MXFP8_OFF = ("fp8_param_gather", "reuse_grad_buf_for_mxfp8_param_ag")


def _apply_precision(cfg: dict[str, Any], container: Any, report=print) -> None:
    """The precision preset in place of the recipe's mixed-precision config; the recipe's gradient-reduction dtype and
    every ``mixed_precision.*`` field the test set (bridge_overrides, set on the recipe's config before) carried over,
    so a field the test names is never replaced by the preset's default."""
    preset = BRIDGE_PRECISION_RECIPES[cfg["precision"]]
    if preset is None:
        return
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    mixed = get_mixed_precision_config(preset)
    recipe_mixed = container.mixed_precision
    if hasattr(recipe_mixed, "grad_reduce_in_fp32"):
        # Only the number format changes: gradient reduction stays as the recipe tuned it.
        mixed.grad_reduce_in_fp32 = recipe_mixed.grad_reduce_in_fp32
    container.mixed_precision = mixed
    prefix = "mixed_precision."
    set_fields(container, {k: v for k, v in bridge_overrides(cfg).items() if k.startswith(prefix)})
    if cfg["optimizer"] == "muon" and getattr(mixed, "fp8_recipe", None) == "mxfp8":
        for name in MUON_MXFP8_OFF:
            if getattr(mixed, name, False):
                setattr(mixed, name, False)
                report(f"MBRIDGE_PROVIDER mixed_precision.{name}: True -> False (Muon's optimizer has no "
                       "distributed param-gather buffer; as upstream's Kimi-K2 MXFP8 configs)")


def _apply_data(cfg: dict[str, Any], container: Any) -> None:
    """mock: the recipe's GPTDatasetConfig with no blend (Megatron's mock dataset); pretrain: an indexed-dataset
    prefix (path without .bin/.idx) as the blend; SFT: a FinetuningDatasetConfig on the JSONL folder."""
    data, seq, seed = cfg["data"], cfg["seq_length"], cfg["seed"]
    if cfg["task"] == "sft" and data != "mock":
        from megatron.bridge.training.config import FinetuningDatasetConfig

        if not cfg["hf_model_id"]:
            raise ConfigError("SFT on real data needs hf_model_id: its tokenizer turns the JSONL text into tokens")
        container.dataset = FinetuningDatasetConfig(
            dataset_root=data, seq_length=seq, seed=seed, do_validation=False, do_test=False,
            num_workers=container.dataset.num_workers,
        )
        container.tokenizer.tokenizer_type = "HuggingFaceTokenizer"
        container.tokenizer.tokenizer_model = cfg["hf_model_id"]
        container.tokenizer.hf_tokenizer_kwargs = {"trust_remote_code": trust_remote_code(cfg)}
        return
    ds = container.dataset
    ds.blend = None if data == "mock" else ([data], None)
    ds.blend_per_split = None
    if hasattr(ds, "data_path"):
        ds.data_path = None
    ds.seq_length = seq
    ds.random_seed = seed


def _fit_warmup(container: Any, train_iters: int) -> None:
    """Recipes warm up over 2000 iterations; Megatron-Core asserts warmup < decay, and a benchmark runs ~20. A config's
    constant lr (config.py constant_lr_fields) has set lr_warmup_iters = 0 before: that is left as it is."""
    sched = container.scheduler
    decay = sched.lr_decay_iters or train_iters
    if sched.lr_warmup_iters >= decay:
        sched.lr_warmup_iters = max(0, decay - 1)


def lr_report(cfg: dict[str, Any], container: Any) -> str:
    """The MBRIDGE_LR line of the container's learning-rate schedule as it will train (the config's constant lr, or
    the recipe's schedule after _fit_warmup)."""
    opt, sched = container.optimizer, container.scheduler
    return lr_line(lr=opt.lr, min_lr=opt.min_lr, warmup_iters=sched.lr_warmup_iters,
                   decay_style=getattr(sched, "lr_decay_style", "?"),
                   source="config" if cfg.get("lr") is not None else "recipe")


def build_container(cfg: dict[str, Any], model_dir: str, report=print):
    """The recipe's container with the run's provider and every field of the sweep point; `report` gets the lines
    that say what was changed (provider fields against the recipe's, fused kernels switched off)."""
    recipe, container = _recipe_container(cfg)
    container.model = _model_provider(cfg, model_dir, container.model)
    model_cfg = container.model
    _check_identity(cfg, model_cfg)
    recipe_fields = provider_fields(model_cfg)
    if cfg["echo"] is not None:
        import megatron.core

        missing_echo_fields(cfg, set(dir(model_cfg)), f"megatron-core {getattr(megatron.core, '__version__', '?')}")
    if container.comm_overlap is None:
        from megatron.bridge.training.comm_overlap import CommOverlapConfig

        container.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
    set_fields(container, bridge_overrides(cfg))
    if cfg.get("use_precision_aware_optimizer"):
        _precision_aware_dtypes(container.optimizer)
    _apply_dispatcher(cfg, model_cfg)
    _apply_layout(cfg, model_cfg, recipe)
    _apply_precision(cfg, container, report)
    _apply_data(cfg, container)
    _fit_warmup(container, cfg["train_iters"])
    report(lr_report(cfg, container))
    for name, reason in apply_fusion_fallbacks(model_cfg):
        report(f"MBRIDGE_FALLBACK {name}=False ({reason})")
    for name, old, new in changed_fields(recipe_fields, provider_fields(model_cfg)):
        report(f"MBRIDGE_PROVIDER {name}: {_short(old)} -> {_short(new)}")
    return recipe, container


def run(cfg: dict[str, Any], dist: dist_env.DistEnv) -> None:
    def say(line: str) -> None:
        if dist.rank == 0:
            print(line, flush=True)

    # First: the Hugging Face environment (huggingface_hub reads it once, when Bridge imports it).
    try:
        hub = hf_config.prepare(cfg, cfg["output_dir"] or tempfile.mkdtemp(prefix="mbridge_hf_"))
    except hf_config.HubError as e:
        raise ConfigError(str(e)) from None
    say(hub.line())
    deep_ep, deep_ep_error = import_deep_ep()
    check_deep_ep(cfg["dispatcher"], cfg["deepep_impl"], deep_ep, deep_ep_error)
    unset = hybridep_domain_env(cfg, os.environ)
    if unset:
        say(unset)
    if cfg["dispatcher"] == "ncclep":
        say(_prepare_nccl_ep(cfg))

    from megatron.bridge.training.callbacks import Callback
    from megatron.bridge.training.finetune import finetune
    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain

    recipe, container = build_container(cfg, str(hub.model_dir), report=say)
    say(f"MBRIDGE_RECIPE {recipe} task={cfg['task']}")
    for line in recipe_env_lines(cfg, getattr(container, "env_vars", None), os.environ):
        say(line)

    class DispatcherReport(Callback):
        def on_train_start(self, context) -> None:
            # the progress watchdog's stages (payload/train/watchdog.py): model built, first dispatch entered
            watchdog.reach("model_built")
            watchdog.watch_dispatch(list(context.model))
            model_cfg = context.state.cfg.model
            built = dispatcher_class_name(first_dispatcher_class(*context.model), model_cfg.moe_token_dispatcher_type)
            backend = built_backend(built, model_cfg.moe_flex_dispatcher_backend)
            if dist.rank == 0:
                print(dispatcher_line(cfg["dispatcher"], built, backend), flush=True)
                print(deep_ep_line(deep_ep), flush=True)
            check_dispatcher(cfg["dispatcher"], built, backend)
            train = context.state.cfg.train
            if dist.rank == 0:
                print(gc_line(train), flush=True)

        def on_train_step_end(self, context) -> None:
            # Bridge fires this before it counts the step (training/train.py): the step that ended is step + 1.
            watchdog.iteration_done(context.state.train_state.step + 1)

    class RoutingReport(Callback):
        """MBRIDGE_ROUTING per rank and iteration (payload/train/routing.py): the A/B's same-routing gate."""

        def __init__(self) -> None:
            self.hash = RoutingHash()
            # time inside dispatch / combine (payload/train/dispatch_timing.py); MBRIDGE_DISPATCH_TIMING=0 turns it
            # off, so that benchmarks/payload_overhead.py can measure what it costs (arm payload_notiming)
            self.timer = DispatcherTimer() if os.environ.get("MBRIDGE_DISPATCH_TIMING", "1") != "0" else None

        def on_train_start(self, context) -> None:
            self.hash.attach(list(context.model))
            if self.timer is not None:
                self.timer.attach(list(context.model))

        def on_train_step_end(self, context) -> None:
            calls, digest = self.hash.take()
            timing = "" if self.timer is None else timing_fields(*self.timer.take())
            # Bridge fires this before it counts the step (training/train.py): the step that ended is step + 1.
            print(routing_line(dist.rank, context.state.train_state.step + 1, calls, digest, timing), flush=True)

    class MemoryReport(Callback):
        """MBRIDGE_MEMORY_BREAKDOWN after iteration 2 (what the recipe really allocated, by owner and dtype) and
        MBRIDGE_STEP_MEMORY for later iterations (each iteration's own peak above what it started with); on when the
        environment sets MBRIDGE_MEMORY_BREAKDOWN=1 (it resets torch's peak counter from iteration 3 on)."""

        def on_train_step_start(self, context) -> None:
            import torch

            iteration = context.state.train_state.step + 1
            if iteration >= 3:
                torch.cuda.reset_peak_memory_stats()
                context.user_state["allocated_before"] = torch.cuda.memory_allocated()

        def on_train_step_end(self, context) -> None:
            import torch

            iteration = context.state.train_state.step + 1  # Bridge counts the step after this callback
            if iteration == 2:
                try:
                    parts = memory_breakdown(context.model, context.optimizer)
                except Exception as e:  # a report must never stop training
                    parts = {"error": repr(e)[:200]}
                parts["allocated"] = torch.cuda.memory_allocated()
                print(f"MBRIDGE_MEMORY_BREAKDOWN rank={dist.rank} iteration={iteration} "
                      + " ".join(f"{k}={v}" for k, v in parts.items()), flush=True)
            elif iteration >= 3 and "allocated_before" in context.user_state:
                print(f"MBRIDGE_STEP_MEMORY rank={dist.rank} iteration={iteration} "
                      f"start={context.user_state['allocated_before']} peak={torch.cuda.max_memory_allocated()} "
                      f"end={torch.cuda.memory_allocated()}", flush=True)

    callbacks = [DispatcherReport()]
    if os.environ.get("MBRIDGE_ROUTING_HASH", "1") != "0":
        callbacks.append(RoutingReport())
    if os.environ.get("MBRIDGE_MEMORY_BREAKDOWN") == "1":
        callbacks.append(MemoryReport())
    entry = finetune if cfg["task"] == "sft" else pretrain
    entry(container, forward_step, callbacks=callbacks)


def gc_line(train: Any) -> str:
    """What Bridge's loop does between steps that shows up as slow iterations: maybe_run_manual_gc runs gc.collect()
    after every step that is a multiple of manual_gc_interval (training/train.py), so the NEXT iteration's elapsed time
    carries it: iterations k * interval + 1 (6, 11, 16, ... for the DeepSeek-V3 recipe's interval 5)."""
    enabled = bool(getattr(train, "manual_gc", False))
    interval = int(getattr(train, "manual_gc_interval", 0) or 0)
    return f"MBRIDGE_GC manual_gc={enabled} interval={interval if enabled else 0}"


def _prepare_nccl_ep(cfg: dict[str, Any]) -> str:
    """The ncclep backend's Transformer Engine module, checked and made to fit Megatron-Core's bootstrap call
    (payload/train/nccl_ep.py prepare_nccl_ep); returns the MBRIDGE_NCCL_EP line."""
    return prepare_nccl_ep(nccl_ep_topk(cfg))


def _chained(opt: Any) -> list[Any] | None:
    """A ChainedOptimizer's members (its instance attribute ``chained_optimizers``), else None; read from the
    instance's own attributes so that no property runs."""
    try:
        members = vars(opt).get("chained_optimizers")
    except TypeError:  # no __dict__
        return None
    return list(members) if members is not None else None


def _is_chained(opt: Any) -> bool:
    return _chained(opt) is not None


def optimizers_in(optimizer: Any) -> list[Any]:
    """Every optimizer object under ``optimizer``, outermost first: a ChainedOptimizer's ``chained_optimizers`` (EP > 1
    gives one per parameter group: dense and expert), then each Megatron optimizer's inner torch optimizer
    (``.optimizer``).

    Megatron-Core's ``ChainedOptimizer.optimizer`` is a property that asserts a single chained optimizer
    (megatron/core/optimizer/optimizer.py L1450-L1458 in 0.19.2: ``"ChainedOptimizer has more than one optimizer when
    accessing self.optimizer"``), an AssertionError that getattr's default does not catch: so ``.optimizer`` is never
    read on a ChainedOptimizer, and another wrapper that raises there is taken as having no inner optimizer."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = [optimizer]
    while stack:
        opt = stack.pop()
        if opt is None or id(opt) in seen:
            continue
        seen.add(id(opt))
        found.append(opt)
        members = _chained(opt)
        if members is not None:
            stack.extend(reversed(members))
            continue
        try:
            inner = getattr(opt, "optimizer", None)
        except AssertionError:
            inner = None
        if inner is not None and inner is not opt:
            stack.append(inner)
    return found


def memory_breakdown(model_chunks: list[Any], optimizer: Any, device_type: str = "cuda") -> dict[str, Any]:
    """Bytes on the GPU by owner, each storage counted once: the DDP param / grad buffers, parameters outside them,
    the optimizer's per-parameter state by key and dtype (exp_avg, exp_avg_sq, master_param, remainders, ...) and
    the tensors its parameter groups hold (the distributed optimizer's main-param shards) by dtype. Every optimizer
    of a ChainedOptimizer is walked (``optimizers_in``). ``device_type``: whose tensors count (a CPU test: "cpu")."""
    import torch

    seen: set[int] = set()
    out: dict[str, int] = {}

    def add(key: str, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type != device_type:
            return
        storage = t.untyped_storage()
        if storage.data_ptr() in seen:
            return
        seen.add(storage.data_ptr())
        out[key] = out.get(key, 0) + storage.nbytes()

    for chunk in model_chunks:
        for buf in [*getattr(chunk, "buffers", []), *getattr(chunk, "expert_parallel_buffers", [])]:
            add(f"param_buffer[{getattr(buf.param_data, 'dtype', None)}]", buf.param_data)
            add(f"grad_buffer[{buf.grad_data.dtype}]", buf.grad_data)
        for param in chunk.parameters():
            add(f"params_outside_buffers[{param.dtype}]", param)
            add(f"main_grad[{getattr(param, 'main_grad', param).dtype}]", getattr(param, "main_grad", None))
    for opt in optimizers_in(optimizer):
        if _is_chained(opt):
            continue  # its state / param_groups are its members', walked on their own
        for state in getattr(opt, "state", {}).values() if isinstance(getattr(opt, "state", None), dict) else []:
            for key, value in (state.items() if isinstance(state, dict) else []):
                if isinstance(value, torch.Tensor):
                    add(f"optimizer_state[{key}:{value.dtype}]", value)
        for group in getattr(opt, "param_groups", []) if isinstance(getattr(opt, "param_groups", None), list) else []:
            for param in group.get("params", []):
                add(f"optimizer_params[{param.dtype}]", param)
        for name in ("shard_fp32_from_float16_groups", "shard_float16_groups", "shard_fp32_groups"):
            for group in getattr(opt, name, None) or []:
                for param in group:
                    add(f"{name}[{param.dtype}]", param)
    return dict(sorted(out.items()))
