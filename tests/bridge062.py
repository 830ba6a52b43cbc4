"""Megatron-Bridge 0.6.2's DeepSeek-V3 and Kimi-K2 perf recipes, read from the released wheel without importing it.

The wheel (``megatron_bridge-0.6.2-py3-none-any.whl``, PyPI) ships them as Python builders under
``megatron/bridge/perf_recipes/{deepseek,kimi}/<gpu>/``. Importing them needs torch and Transformer Engine, so this
module parses their source with ``ast`` and walks each builder's statements: attribute assignments on ``cfg``, the
shared helpers they call (followed into their own source), a builder that starts from another builder, and the
environment dictionary. The result per recipe is a flat ``{"model.tensor_model_parallel_size": 1, ...}`` mapping
with the source line of every value.

``_benchmark_common`` (perf_recipes/_common.py) is the one helper whose effect depends on the state it finds (it
turns the TE op fuser off if on, and te_rng_tracker follows whether CUDA graphs are active); it is modelled below,
everything else is read.

Run as a script (``python tests/bridge062.py``) it writes the project's TOML for every recipe under conf/.
"""

from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudai_mbridge.payload.train.bridge import MUON_MXFP8_OFF

WHEEL_NAME = "megatron_bridge-0.6.2-py3-none-any.whl"
ROOT = "megatron/bridge/perf_recipes/"
FAMILIES = {"deepseek": ("deepseek_v3", "deepseek_v3.py"), "kimi": ("kimi_k2", "kimi_k2.py")}
GPUS = ("h100", "b200", "b300", "gb200", "gb300", "vr200")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cloudai-mbridge" / "wheels"


def wheel_path() -> Path:
    """The 0.6.2 wheel: a local copy if one is known, else ``pip download`` into the user's cache (once).

    RuntimeError (with what to do) when neither works: the drift test must not pass without reading the source."""
    candidates = [Path(os.environ["MBRIDGE_062_WHEEL"])] if os.environ.get("MBRIDGE_062_WHEEL") else []
    here = Path(__file__).resolve().parents[1]
    candidates += [here / ".gpu_stack" / "cache" / WHEEL_NAME, Path("/work/main/.gpu_stack/cache") / WHEEL_NAME,
                   cache_dir() / WHEEL_NAME]
    for c in candidates:
        if c.is_file():
            return c
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    # Bridge 0.6.x declares Requires-Python >= 3.12; the wheel is pure Python and only read here, so it is fetched
    # for 3.12 whatever interpreter runs the tests (pip download refuses it for 3.11 otherwise)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "megatron-bridge==0.6.2", "--no-deps",
                           "--only-binary=:all:", "--python-version", "3.12", "--dest", str(target), "--quiet"],
                          capture_output=True, text=True, timeout=600)
    if (target / WHEEL_NAME).is_file():
        return target / WHEEL_NAME
    raise RuntimeError(f"cannot obtain {WHEEL_NAME}: pip download megatron-bridge==0.6.2 into {target} "
                       f"failed (rc {proc.returncode}: {proc.stderr.strip()[-400:]}). Fix: give this machine "
                       "access to PyPI, or set MBRIDGE_062_WHEEL to a local copy of the wheel")


@dataclass
class Recipe:
    name: str
    family: str  # deepseek / kimi
    model: str  # deepseek_v3 / kimi_k2
    gpu: str
    num_gpus: int
    path: str  # file inside the wheel
    line: int  # the builder's def line
    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (file, line) of the value

    @property
    def variant(self) -> str:
        stem = self.name.removeprefix(f"{self.model}_pretrain_{self.num_gpus}gpu_{self.gpu}_").removesuffix("_config")
        return stem if self.num_gpus == 256 else f"{stem}_{self.num_gpus}gpu"

    def where(self, key: str) -> str:
        file, line = self.lines.get(key, (self.path, self.line))
        return f"{file.removeprefix('megatron/bridge/')} L{line}"


class _UnknownError(Exception):
    pass


class _Interp:
    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources
        self.trees = {p: ast.parse(s, p) for p, s in sources.items()}
        self.funcs: dict[str, tuple[str, ast.FunctionDef]] = {}
        self.consts: dict[str, Any] = {}
        for path, tree in self.trees.items():
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    self.funcs.setdefault(node.name, (path, node))
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                    if isinstance(target, ast.Name) and node.value is not None:
                        with contextlib.suppress(ValueError):
                            self.consts[target.id] = ast.literal_eval(node.value)

    def run(self, name: str) -> tuple[dict[str, Any], dict[str, tuple[str, int]]]:
        path, fn = self.funcs[name]
        values: dict[str, Any] = {}
        lines: dict[str, tuple[str, int]] = {}
        self._body(fn.body, path, values, lines, {})
        return values, lines

    # expressions -------------------------------------------------------------------------------------------------
    def _eval(self, node: ast.AST, local: dict[str, Any], values: dict[str, Any]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in local:
                return local[node.id]
            if node.id in self.consts:
                return self.consts[node.id]
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            raise _UnknownError(node.id)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self._eval(e, local, values) for e in node.elts]
        if isinstance(node, ast.Dict):
            out: dict[str, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    out.update(self._eval(v, local, values))
                else:
                    out[self._eval(k, local, values)] = self._eval(v, local, values)
            return out
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "torch":
                return node.attr  # torch.float32 -> "float32"
            key = _cfg_key(node)
            if key is not None:
                return values.get(key)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = [self._eval(a, local, values) for a in node.args]
            if node.func.id == "_get_kimi_k2_pipeline_layout":
                return ("kimi_k2_table", *args)
        raise _UnknownError(ast.dump(node)[:120])

    # statements --------------------------------------------------------------------------------------------------
    def _set(self, key: str, value: Any, path: str, line: int, values: dict, lines: dict) -> None:
        values[key] = value
        lines[key] = (path, line)

    def _body(self, body: list[ast.stmt], path: str, values: dict, lines: dict, local: dict[str, Any]) -> None:
        for st in body:
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
                continue  # docstring
            if isinstance(st, ast.Return):
                continue
            if isinstance(st, ast.Assign):
                self._assign(st, path, values, lines, local)
            elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                self._call(st.value, path, values, lines, local)
            elif isinstance(st, ast.If):
                try:
                    test = self._eval(st.test, local, values)
                except _UnknownError as e:
                    raise _UnknownError(f"{path} L{st.lineno}: condition {e}") from None
                self._body(st.body if test else st.orelse, path, values, lines, local)
            else:
                raise _UnknownError(f"{path} L{st.lineno}: statement {type(st).__name__}")

    def _assign(self, st: ast.Assign, path: str, values: dict, lines: dict, local: dict) -> None:
        value_node = st.value
        for target in st.targets:
            if isinstance(target, ast.Name) and target.id == "cfg":
                call = value_node
                assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                callee = call.func.id
                if callee in ("deepseek_v3_pretrain_config", "kimi_k2_pretrain_config"):
                    self._set("base", callee, path, st.lineno, values, lines)
                else:  # a builder that starts from another builder
                    v, ln = self.run(callee)
                    values.update(v)
                    lines.update(ln)
                continue
            key = _cfg_key(target)
            if key is None:
                raise _UnknownError(f"{path} L{st.lineno}: target {ast.dump(target)[:80]}")
            if (key == "mixed_precision" and isinstance(value_node, ast.Call)
                    and getattr(value_node.func, "id", "") == "_perf_precision"):
                value = self._eval(value_node.args[0], local, values)
            else:
                value = self._eval(value_node, local, values)
            self._set(key, value, path, st.lineno, values, lines)

    def _call(self, call: ast.Call, path: str, values: dict, lines: dict, local: dict) -> None:
        assert isinstance(call.func, ast.Name), ast.dump(call)[:80]
        name = call.func.id
        if name == "set_deepseek_v3_pipeline_model_parallel_layout":
            layout = self._eval(call.args[1], local, values) if len(call.args) > 1 else ("deepseek_v3_table",)
            self._set("model.pipeline_model_parallel_layout", layout, path, call.lineno, values, lines)
            return
        if name == "_benchmark_common":
            _benchmark_common(values, lines, (path, call.lineno))
            return
        callee_path, fn = self.funcs[name]
        params = [a.arg for a in fn.args.args]
        defaults = dict(zip([a.arg for a in fn.args.kwonlyargs], fn.args.kw_defaults, strict=True))
        defaults.update(zip(params[len(params) - len(fn.args.defaults):], fn.args.defaults, strict=True))
        bound = {k: ast.literal_eval(v) for k, v in defaults.items() if v is not None}
        for kw in call.keywords:
            bound[kw.arg] = self._eval(kw.value, local, values)
        self._body(fn.body, callee_path, values, lines, bound)


def _cfg_key(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "cfg" and parts:
        return ".".join(reversed(parts))
    return None


def _benchmark_common(values: dict, lines: dict, at: tuple[str, int]) -> None:
    """What perf_recipes/_common.py _benchmark_common does to the settings the project compares (0.6.2 L30-L86):
    50 iterations, the TE op fuser off if a recipe had it on, te_rng_tracker on exactly when CUDA graphs run, and
    32 HybridEP SMs. The rest (logging, checkpointing, scheduler) has no cmd_args counterpart."""
    def put(key: str, value: Any) -> None:
        values[key] = value
        lines[key] = at

    put("train.train_iters", 50)
    put("train.manual_gc", True)
    put("scheduler.lr_warmup_iters", 10)
    if values.get("model.use_transformer_engine_op_fuser"):
        put("model.use_transformer_engine_op_fuser", False)
    put("model.apply_rope_fusion", True)
    put("model.cross_entropy_fusion_impl", "te")
    put("ddp.grad_reduce_in_fp32", False)
    impl = values.get("model.cuda_graph_impl")
    scope = values.get("model.cuda_graph_scope") or []
    active = (impl is not None and impl != "none") or "full_iteration" in scope
    if impl == "none":
        put("model.cuda_graph_scope", [])
    if impl is not None or scope:
        put("rng.te_rng_tracker", active)
        put("model.use_te_rng_tracker", active)
    if values.get("model.moe_flex_dispatcher_backend") == "hybridep":
        put("model.moe_hybridep_num_sms", 32)


def read_sources(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n).decode() for n in z.namelist()
                if n.startswith(ROOT) and n.endswith(".py") and (n.count("/") <= 3 or n.split("/")[3] in FAMILIES)}


def recipes(wheel: Path | None = None) -> dict[str, Recipe]:
    """Every DeepSeek-V3 and Kimi-K2 recipe of the wheel, by builder name."""
    sources = read_sources(wheel or wheel_path())
    interp = _Interp(sources)
    found: dict[str, Recipe] = {}
    for family, (model, module) in FAMILIES.items():
        for gpu in GPUS:
            path = f"{ROOT}{family}/{gpu}/{module}"
            if path not in sources:
                continue
            for node in interp.trees[path].body:
                if not (isinstance(node, ast.FunctionDef) and node.name.endswith("_config")
                        and node.name.startswith(f"{model}_pretrain_")):
                    continue
                num_gpus = int(node.name.removeprefix(f"{model}_pretrain_").split("gpu_")[0])
                values, lines = interp.run(node.name)
                found[node.name] = Recipe(node.name, family, model, gpu, num_gpus, path, node.lineno, values, lines)
    return found


PRECISIONS = {"bf16": "bf16", "fp8_cs": "fp8_tensorwise", "fp8_mx": "mxfp8", "nvfp4": "nvfp4"}
SYSTEMS = {"h100": "slurm_h100_ib", "b200": "slurm_b200_ib", "b300": "slurm_b300_ib", "gb200": "slurm_gb200_nvl72",
           "gb300": "slurm_gb300_nvl72", "vr200": "slurm_vr200_nvl72"}
GPUS_PER_NODE = {"h100": 8, "b200": 8, "b300": 8, "gb200": 4, "gb300": 4, "vr200": 4}


def cmd_args(r: Recipe) -> tuple[dict[str, Any], dict[str, str]]:
    """The project's cmd_args for a recipe, and which recipe key each came from (for the drift test's message)."""
    v = r.values
    out: dict[str, Any] = {}
    src: dict[str, str] = {}

    def put(arg: str, value: Any, key: str) -> None:
        out[arg] = value
        src[arg] = key

    put("model", r.model, "base")
    for arg, key in (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
                     ("vp", "virtual_pipeline_model_parallel_size"), ("cp", "context_parallel_size"),
                     ("ep", "expert_model_parallel_size"), ("etp", "expert_tensor_parallel_size")):
        value = v.get(f"model.{key}", 1 if arg == "etp" else None)
        if value is not None:
            put(arg, value, f"model.{key}")
    put("mbs", v["train.micro_batch_size"], "train.micro_batch_size")
    put("gbs", v["train.global_batch_size"], "train.global_batch_size")
    put("seq_length", v.get("model.seq_length") or 4096, "model.seq_length")
    put("train_iters", v["train.train_iters"], "train.train_iters")
    precision = PRECISIONS[v["mixed_precision"]]
    if v.get("mixed_precision.fp8_recipe") == "blockwise":
        precision = "fp8_blockwise"
    put("precision", precision, "mixed_precision")
    flex = v.get("model.moe_token_dispatcher_type") == "flex"
    put("dispatcher", v["model.moe_flex_dispatcher_backend"] if flex else "alltoall",
        "model.moe_flex_dispatcher_backend")
    put("moe_a2a_overlap", bool(v.get("comm_overlap.overlap_moe_expert_parallel_comm", False)),
        "comm_overlap.overlap_moe_expert_parallel_comm")
    if "model.moe_shared_expert_overlap" in v:
        put("moe_shared_expert_overlap", v["model.moe_shared_expert_overlap"], "model.moe_shared_expert_overlap")
    put("recompute", v.get("model.recompute_granularity") or "none", "model.recompute_granularity")
    put("recompute_modules", ",".join(v.get("model.recompute_modules") or []), "model.recompute_modules")
    put("cuda_graph_impl", v.get("model.cuda_graph_impl") or "none", "model.cuda_graph_impl")
    put("cuda_graph_scope", ",".join(v.get("model.cuda_graph_scope") or []), "model.cuda_graph_scope")
    put("force_balanced_routing", bool(v.get("model.moe_router_force_load_balancing")),
        "model.moe_router_force_load_balancing")
    layout = v.get("model.pipeline_model_parallel_layout")
    if isinstance(layout, str):
        put("pipeline_layout", layout, "model.pipeline_model_parallel_layout")
    put("sequence_parallel", bool(v.get("model.sequence_parallel")), "model.sequence_parallel")
    if r.model == "kimi_k2":
        put("optimizer", "muon", "base")  # 0.6.2's kimi_k2_pretrain_config configures Muon (catalog/bridge.py)
    if v.get("ddp.use_megatron_fsdp"):
        put("use_megatron_fsdp", True, "ddp.use_megatron_fsdp")
        put("data_parallel_sharding_strategy", v["ddp.data_parallel_sharding_strategy"],
            "ddp.data_parallel_sharding_strategy")
    for arg in ("outer_dp_sharding_strategy", "num_distributed_optimizer_instances"):
        if f"ddp.{arg}" in v:
            put(arg, v[f"ddp.{arg}"], f"ddp.{arg}")
    if v.get("model.fp8_param_gather"):
        put("fp8_param_gather", True, "model.fp8_param_gather")
    for arg in ("moe_paged_stash", "use_transformer_engine_op_fuser", "fp8_output_proj"):
        if v.get(f"model.{arg}"):
            put(arg, True, f"model.{arg}")
    if v.get("mixed_precision.fp8_dot_product_attention"):
        put("fp8_dot_product_attention", True, "mixed_precision.fp8_dot_product_attention")
    if v.get("comm_overlap.delay_wgrad_compute"):
        put("delay_wgrad_compute", True, "comm_overlap.delay_wgrad_compute")
    if v.get("model.fine_grained_activation_offloading"):
        put("offload_modules", ",".join(v["model.offload_modules"]), "model.offload_modules")
        cap = "model.fine_grained_offloading_max_inflight_offloads"
        if v.get(cap) is not None:
            put("fine_grained_offloading_max_inflight_offloads", v[cap], cap)
    if flex and v.get("model.moe_expert_rank_capacity_factor") is not None and v.get("model.moe_paged_stash"):
        put("moe_expert_rank_capacity_factor", v["model.moe_expert_rank_capacity_factor"],
            "model.moe_expert_rank_capacity_factor")
    return out, src


def env(r: Recipe) -> dict[str, str]:
    return {k: str(int(x) if isinstance(x, bool) else x) for k, x in r.values.get("env_vars", {}).items()}


_COVERED = {"base", "env_vars", "mixed_precision", "dataset.seq_length", "rng.te_rng_tracker",
            "model.use_te_rng_tracker", "model.moe_token_dispatcher_type", "model.fine_grained_activation_offloading",
            "mixed_precision.fp8_param", "ddp.overlap_grad_reduce", "mixed_precision.fp8_recipe"}


def not_expressed(r: Recipe) -> list[str]:
    """Recipe settings with no cmd_args counterpart (the TOML header lists them: the run differs there)."""
    args, src = cmd_args(r)
    used = set(src.values()) | _COVERED
    if args.get("optimizer") == "muon" and args.get("precision") == "mxfp8":
        # the payload switches both off for Muon with MXFP8 itself (payload/train/bridge.py MUON_MXFP8_OFF)
        used |= {f"mixed_precision.{k}" for k in MUON_MXFP8_OFF if r.values.get(f"mixed_precision.{k}") is False}
    return [f"{k} = {r.values[k]!r} ({r.where(k)})" for k in r.values if k not in used]


def drift(r: Recipe, doc: dict[str, Any], file: str) -> list[str]:
    """Where a shipped TOML (parsed) differs from the recipe: one line per field, naming the file, the field, our
    value, the wheel's value and the recipe line it comes from."""
    want, src = cmd_args(r)
    out = [f"{file}: {arg} = {doc.get('cmd_args', {}).get(arg)!r}, the wheel says {value!r} ({r.where(src[arg])})"
           for arg, value in want.items() if doc.get("cmd_args", {}).get(arg) != value]
    if doc.get("extra_env_vars", {}) != env(r):
        out.append(f"{file}: [extra_env_vars] = {doc.get('extra_env_vars', {})!r}, the wheel says {env(r)!r} "
                   f"({r.where('env_vars')})")
    return out


# Recipes that upstream itself cannot run, by toml_name without "nvidia062_": the project rule that refuses them
# and why Megatron-Core refuses them too (read from the megatron-core 0.19.2 wheel, the release Bridge 0.6.2 pins;
# 0.17.1 has the same checks at the lines given second). The TOML header says it (render).
_EP_WORLD = ("megatron/core/parallel_state.py L881-L884 (0.19.2; L796-L799 in 0.17.1) initialize_model_parallel "
             "raises RuntimeError when the world size is not divisible by etp*ep*pp")
_VP_LAYOUT = ("megatron/core/transformer/transformer_config.py L1974-L1979 (0.19.2; L1525-L1530 in 0.17.1) asserts "
              "virtual_pipeline_model_parallel_size == the layout's stage count / pp")
UPSTREAM_CANNOT_RUN: dict[str, tuple[str, str]] = {
    **{f"dsv3_h100_{v}_64gpu": ("world-size-expert-parallel",
                                f"64 GPUs with the 1024-GPU layout: etp 1 x ep 64 x pp 8 = 512 ranks. {_EP_WORLD}")
       for v in ("bf16", "fp8cs")},
    **{f"dsv3_{g}_fp8mx_partial_cg_dev": ("pipeline-layout",
                                          "pp 4 x vp 2 = 8 stages, but the layout 'Et*4|(tttt|)*14tmL' has 16 "
                                          f"(16 / pp 4 = vp 4). {_VP_LAYOUT}")
       for g in ("gb200", "gb300")},
    **{f"dsv3_vr200_{v}_128gpu": ("world-size-expert-parallel",
                                  f"128 GPUs: etp 1 x ep 64 x pp 4 = 256 ranks. {_EP_WORLD}")
       for v in ("bf16", "fp8cs", "fp8mx", "nvfp4")},
}


def toml_name(r: Recipe) -> str:
    short = "dsv3" if r.model == "deepseek_v3" else "kimi_k2"
    return f"nvidia062_{short}_{r.gpu}_{r.variant}"


def _toml_value(x: Any) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, str):
        return '"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(x)


def render(r: Recipe) -> str:
    args, src = cmd_args(r)
    lines = [f"# Megatron-Bridge 0.6.2's perf recipe {r.name} ({r.path.removeprefix('megatron/bridge/')} L{r.line}),",
             "# written by tests/bridge062.py from the released wheel; tests/test_bridge062_recipes.py fails when a",
             "# value here drifts from the wheel's source. Each cmd_arg's recipe line:"]
    lines += [f"#   {a:<32} {src[a]:<45} {r.where(src[a]) if src[a] != 'base' else ''}".rstrip() for a in args]
    lines += ["# Recipe settings with no cmd_arg (the payload keeps Bridge's recipe defaults there):"]
    lines += [f"#   {line}" for line in not_expressed(r)] or ["#   (none)"]
    refused = UPSTREAM_CANNOT_RUN.get(toml_name(r).removeprefix("nvidia062_"))
    if refused:
        lines += [f"# UPSTREAM CANNOT RUN THIS RECIPE as published; preflight refuses it (rule {refused[0]}):"]
        lines += [f"#   {part}" for part in textwrap.wrap(refused[1], 112)]
    lines += ["", f'name = "{toml_name(r)}"',
              f'description = "Megatron-Bridge 0.6.2 {r.model} perf recipe {r.gpu.upper()} {r.variant} '
              f'({r.num_gpus} GPUs)"', 'test_template_name = "MBridgeTraining"', "", "[cmd_args]"]
    args = {"model": args.pop("model"), "task": "pretrain", "bridge_version": "0.6", **args, "data": "mock"}
    lines += [f"{k} = {_toml_value(x)}" for k, x in args.items()]
    lines += ["", "[extra_env_vars]"] + [f"{k} = {_toml_value(x)}" for k, x in env(r).items()]
    return "\n".join(lines) + "\n"


def write_all(conf: Path) -> None:
    rs = recipes()
    for r in rs.values():
        (conf / "test" / f"{toml_name(r)}.toml").write_text(render(r))
    for gpu in GPUS:
        mine = [r for r in rs.values() if r.gpu == gpu]
        text = [f"# Megatron-Bridge 0.6.2's DeepSeek-V3 and Kimi-K2 perf recipes for {gpu.upper()}, one [[Tests]] "
                "each,",
                f"# at the GPU count each recipe names; use with conf/system/{SYSTEMS[gpu]}.toml "
                f"({GPUS_PER_NODE[gpu]} GPUs per node).", "", f'name = "nvidia062_{gpu}"']
        for r in mine:
            text += ["", f"# {r.name}", "[[Tests]]", f'id = "{toml_name(r).removeprefix("nvidia062_")}"',
                     f'test_name = "{toml_name(r)}"', f"num_nodes = {r.num_gpus // GPUS_PER_NODE[gpu]}",
                     'time_limit = "01:30:00"']
        (conf / "test_scenario" / f"nvidia062_{gpu}.toml").write_text("\n".join(text) + "\n")


if __name__ == "__main__":
    write_all(Path(__file__).resolve().parents[1] / "conf")
