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
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "megatron-bridge==0.6.2", "--no-deps",
                           "--only-binary=:all:", "--dest", str(target), "--quiet"],
                          capture_output=True, text=True, timeout=600)
    if (target / WHEEL_NAME).is_file():
        return target / WHEEL_NAME
    raise RuntimeError(f"cannot obtain {WHEEL_NAME}: pip download megatron-bridge==0.6.2 into {target} failed "
                       f"(rc {proc.returncode}: {proc.stderr.strip()[-400:]}). Fix: give the network access to PyPI, or "
                       f"set MBRIDGE_062_WHEEL to a local copy of the wheel")


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


class _Unknown(Exception):
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
                        try:
                            self.consts[target.id] = ast.literal_eval(node.value)
                        except ValueError:
                            pass

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
            raise _Unknown(node.id)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self._eval(e, local, values) for e in node.elts]
        if isinstance(node, ast.Dict):
            out: dict[str, Any] = {}
            for k, v in zip(node.keys, node.values):
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
        raise _Unknown(ast.dump(node)[:120])

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
                except _Unknown as e:
                    raise _Unknown(f"{path} L{st.lineno}: condition {e}") from None
                self._body(st.body if test else st.orelse, path, values, lines, local)
            else:
                raise _Unknown(f"{path} L{st.lineno}: statement {type(st).__name__}")

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
                raise _Unknown(f"{path} L{st.lineno}: target {ast.dump(target)[:80]}")
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
        defaults = dict(zip([a.arg for a in fn.args.kwonlyargs], fn.args.kw_defaults))
        defaults.update(zip(params[len(params) - len(fn.args.defaults):], fn.args.defaults))
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


if __name__ == "__main__":
    for r in recipes().values():
        print(r.name, r.variant, {k: v for k, v in r.values.items() if k != "env_vars"})
