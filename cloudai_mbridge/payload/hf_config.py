"""Hugging Face model configs without the hub: the run's architecture as a local config.json, a private hub cache
that serves it under the recipe's model id, and a hub check that fails fast instead of retrying.

Megatron-Bridge builds every provider from a Hugging Face config: its DeepSeek-V3 / Kimi-K2 recipes call
``AutoBridge.from_hf_pretrained("<org>/<model>")`` with a literal hub id, which on a compute node without internet
retries for about 70 s and dies. Here:

- The model's config.json is either the catalog's architecture (``architecture_config``: a ``DeepseekV3ForCausalLM``
  config that transformers reads natively, no remote code) or the user's ``hf_config_dir`` (a folder holding the
  model's config.json, and its custom code if it has any). What is copied from that folder (``config_dir_files``):
  its ``*.json`` and ``*.py`` files, each a regular file inside the folder (a link that leads out of it, a FIFO or a
  device is refused), at most MAX_CONFIG_FILE_BYTES each and MAX_CONFIG_DIR_BYTES together, and a config.json that
  is a JSON object naming a ``model_type`` or ``architectures`` (a model config, not any JSON).
- It is written under the run's output, ``<output_dir>/hf_cache/``: ``model/`` (the folder the provider is built
  from) and ``hub/`` (a Hugging Face hub cache). The hub cache serves the same config under each id a recipe asks
  for, and links every model of the user's own cache (``HF_HUB_CACHE``, ``HF_HOME/hub`` or ``~/.cache/huggingface/hub``)
  so that tokenizers and weights already cached there are still found. Nothing is written outside the output folder.
- ``settle_hub`` says which ids still need the hub (a hub id that no cache holds). None: the process runs with
  ``HF_HUB_OFFLINE=1``, so nothing can sit in a retry loop. Some, and ``HF_HUB_OFFLINE`` is set or the hub does not
  answer within a few seconds: a ``HubError`` that names ``hf_model_id`` and how to pre-stage it.

Pure stdlib: the tests call it without Bridge, and the generator side shares ``needs_hub``'s rule.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CACHE_DIR = "hf_cache"
# Bridge recipes' literal hub ids (0.4.x and 0.6.x): served from the private cache with the run's architecture.
RECIPE_HUB_IDS = ("deepseek-ai/DeepSeek-V3", "moonshotai/Kimi-K2-Instruct")
PROBE_TIMEOUT_S = 5.0
# What hf_config_dir may hand over: a config.json is a few KB, custom modeling code some 100 KB, a tokenizer.json
# under 20 MB; every rank copies the files twice into the run's output folder.
MAX_CONFIG_FILE_BYTES = 32 * 1024 * 1024
MAX_CONFIG_DIR_BYTES = 64 * 1024 * 1024
MAX_CONFIG_FILES = 256


class HubError(RuntimeError):
    """A model config, tokenizer or checkpoint that only the hub has, and the hub is off or unreachable."""


def architecture_config(model: dict[str, Any]) -> dict[str, Any]:
    """The catalog's architecture as a Hugging Face DeepSeek-V3 config.json (the keys Megatron-Bridge's
    DeepSeekV3Bridge and its CONFIG_MAPPING read). Proxies get every field a full model's config has, so nothing the
    provider derives (query groups from key/value heads, MoE layer pattern, MLA head dims, MTP) is left at the full
    model's value."""
    dense = model["first_k_dense"]
    shared = model["shared_expert_intermediate_size"]
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": model["vocab_size"],
        "hidden_size": model["hidden_size"],
        "intermediate_size": model["ffn_hidden_size"],
        "moe_intermediate_size": model["moe_ffn_hidden_size"],
        "num_hidden_layers": model["num_layers"],
        "num_nextn_predict_layers": model.get("mtp_num_layers") or 0,
        "num_attention_heads": model["num_attention_heads"],
        "num_key_value_heads": model["num_attention_heads"],  # MLA: one KV group per head
        "n_shared_experts": 1 if shared else 0,
        "n_routed_experts": model["num_experts"],
        "routed_scaling_factor": model.get("routed_scaling_factor", 2.5),
        "kv_lora_rank": model["kv_lora_rank"],
        "q_lora_rank": model["q_lora_rank"],
        "qk_rope_head_dim": model["qk_pos_emb_head_dim"],
        "qk_nope_head_dim": model["qk_head_dim"],
        "v_head_dim": model["v_head_dim"],
        "topk_method": "noaux_tc",
        "n_group": model["router_num_groups"],
        "topk_group": model["router_group_topk"],
        "num_experts_per_tok": model["moe_router_topk"],
        "first_k_dense_replace": dense,
        "moe_layer_freq": 1,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "hidden_act": "silu",
        "max_position_embeddings": model["max_position_embeddings"],
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "rope_theta": model.get("rope_theta", 10000.0),
        "rope_scaling": {
            "type": "yarn",
            "factor": model.get("rope_scaling_factor", 40.0),
            "original_max_position_embeddings": 4096,
            "beta_fast": model.get("rope_beta_fast", 32.0),
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "bfloat16",
        "mbridge_source": f"cloudai-mbridge catalog: {model['name']}",
    }


def is_local(ref: str | None) -> bool:
    """A model reference that is a folder on disk (absolute path), not a hub id."""
    return bool(ref) and Path(ref).is_absolute()


def user_hub_cache(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return Path(env.get("HOME", "~")).expanduser() / ".cache" / "huggingface" / "hub"


def _entry(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def cached(cache: Path, repo_id: str) -> bool:
    """The hub cache holds a snapshot of repo_id with a config.json (what from_hf_pretrained and tokenizers read)."""
    entry = _entry(cache, repo_id)
    ref = entry / "refs" / "main"
    if not ref.is_file():
        return False
    return (entry / "snapshots" / ref.read_text(encoding="utf-8").strip() / "config.json").is_file()


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: every rank may write the same file at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def stage_entry(cache: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """A hub-cache entry for repo_id holding `files` (name -> bytes); its revision is their content hash."""
    digest = hashlib.sha1()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    rev = digest.hexdigest()
    entry = _entry(cache, repo_id)
    snapshot = entry / "snapshots" / rev
    for name, data in files.items():
        _write(snapshot / name, data)
    _write(entry / "refs" / "main", rev.encode())
    return snapshot


def read_limited(path: Path, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of ``path`` (more than ``limit`` means too large), opened with O_NONBLOCK so that
    a FIFO swapped in after a check cannot block the open."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit + 1)


def model_config_problem(data: bytes) -> str | None:
    """Why ``data`` is not a Hugging Face model config.json (None when it is one)."""
    try:
        config = json.loads(data.decode("utf-8"))
    except RecursionError:
        return "is nested too deeply to be a model config"
    except (UnicodeDecodeError, ValueError) as e:
        return f"is not JSON ({e})"
    if not isinstance(config, dict):
        return "is not a JSON object"
    arch = config.get("architectures")
    if not isinstance(config.get("model_type"), str) and not (
            isinstance(arch, list) and arch and all(isinstance(a, str) for a in arch)):
        return "is not a Hugging Face model config (it names no model_type or architectures)"
    return None


def config_dir_files(folder: str | Path) -> dict[str, bytes]:
    """The files of hf_config_dir that the run copies (its ``*.json`` and ``*.py``: the model's config.json and any
    custom code or tokenizer files beside it), as name -> bytes. HubError, naming hf_config_dir and the file, for a
    folder that is missing or holds no config.json, a link that leads out of the folder, anything but a regular file,
    a file above MAX_CONFIG_FILE_BYTES (MAX_CONFIG_DIR_BYTES in all), or a config.json that is no model config."""
    where = f"hf_config_dir = {str(folder)!r}"
    fix = ("Fix: point hf_config_dir at a folder holding the model's own Hugging Face config.json (`huggingface-cli "
           "download <id> config.json --local-dir ...`)")
    path = Path(folder)
    if not path.is_dir():
        raise HubError(f"{where} is not a folder. {fix}")
    root = path.resolve()
    entries = sorted(p for p in path.iterdir() if p.suffix in (".json", ".py"))
    if "config.json" not in {p.name for p in entries}:
        raise HubError(f"{where} holds no config.json. {fix}")
    if len(entries) > MAX_CONFIG_FILES:
        raise HubError(f"{where} holds {len(entries)} *.json / *.py files (at most {MAX_CONFIG_FILES}). {fix}")
    files: dict[str, bytes] = {}
    total = 0
    for entry in entries:
        target = entry.resolve()
        if target.parent != root and root not in target.parents:
            raise HubError(f"{where}: {entry.name} is a link to {target}, outside the folder; only the folder's own "
                           f"files are copied. {fix}")
        try:
            mode = entry.stat().st_mode
        except OSError as e:
            raise HubError(f"{where}: {entry.name} cannot be read ({e.strerror}). {fix}") from None
        if stat.S_ISDIR(mode) and entry.name != "config.json":
            continue  # a folder named *.json / *.py is not a file to copy
        if not stat.S_ISREG(mode):
            raise HubError(f"{where}: {entry.name} is not a regular file. {fix}")
        try:
            data = read_limited(entry, MAX_CONFIG_FILE_BYTES)
        except OSError as e:
            raise HubError(f"{where}: {entry.name} cannot be read ({e.strerror}). {fix}") from None
        if len(data) > MAX_CONFIG_FILE_BYTES:
            raise HubError(f"{where}: {entry.name} is larger than {MAX_CONFIG_FILE_BYTES // (1024 * 1024)} MiB. "
                           f"{fix}")
        total += len(data)
        if total > MAX_CONFIG_DIR_BYTES:
            raise HubError(f"{where}: its *.json / *.py files exceed {MAX_CONFIG_DIR_BYTES // (1024 * 1024)} MiB "
                           f"together. {fix}")
        files[entry.name] = data
    why = model_config_problem(files["config.json"])
    if why:
        raise HubError(f"{where}: config.json {why}. {fix}")
    return files


def _config_files(cfg: dict[str, Any]) -> tuple[str, dict[str, bytes]]:
    """(source, files) of the model's config: the user's hf_config_dir (config_dir_files) or the catalog's
    architecture."""
    folder = cfg.get("hf_config_dir")
    if folder:
        return f"hf_config_dir {folder}", config_dir_files(folder)
    text = json.dumps(architecture_config(cfg["model"]), indent=2, sort_keys=True) + "\n"
    return f"catalog {cfg['model']['name']}", {"config.json": text.encode()}


@dataclass
class HubPlan:
    cache: Path  # the private hub cache (HF_HUB_CACHE for the run)
    model_dir: Path  # the folder the provider is built from
    source: str  # where the model's config came from
    needs_hub: list[str] = field(default_factory=list)  # ids only the hub has
    linked: int = 0  # models of the user's cache made visible

    def line(self) -> str:
        hub = "offline" if not self.needs_hub else "online for " + ",".join(self.needs_hub)
        return (f"MBRIDGE_HF_CONFIG source={self.source} model_dir={self.model_dir} cache={self.cache} "
                f"user_models_linked={self.linked} hub={hub}")


def hub_refs(cfg: dict[str, Any]) -> list[str]:
    """Model references the run resolves through Hugging Face besides the architecture: the tokenizer of SFT on real
    data, and the checkpoint a conversion reads (both hf_model_id)."""
    sft_text = cfg.get("task") == "sft" and cfg.get("data", "mock") != "mock"
    ref = cfg.get("hf_model_id")
    return [ref] if ref and (sft_text or cfg.get("convert")) else []


def needs_hub(cfg: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    """The hub ids of `hub_refs` that neither a local path nor the user's hub cache provides."""
    cache = user_hub_cache(env)
    return [ref for ref in hub_refs(cfg) if not is_local(ref) and not cached(cache, ref)]


def prestage_hint(ids: list[str]) -> str:
    first = ids[0]
    return (f"pre-stage it on a machine with internet (`huggingface-cli download {first} --local-dir "
            f"/shared/models/{first.split('/')[-1]}`) and set hf_model_id to that absolute path, or point HF_HOME at a "
            "shared Hugging Face cache that holds it")


def hub_reachable(timeout: float = PROBE_TIMEOUT_S, env: dict[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    endpoint = env.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint + "/api/models?limit=1", method="HEAD"),
                               timeout=timeout).close()
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError):
        return False
    return True


def check_hub(ids: list[str], env: dict[str, str] | None = None, probe=hub_reachable) -> None:
    """Refuse, at once and with the way out, a run whose ids only the hub has while the hub is off or silent."""
    if not ids:
        return
    env = os.environ if env is None else env
    offline = env.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    if offline or not probe(env=env):
        why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub does not answer from this node"
        raise HubError(f"hf_model_id = {ids[0]!r} is not in any local Hugging Face cache and {why}; "
                       + prestage_hint(ids))


def settle_hub(cfg: dict[str, Any], env: dict[str, str] | None = None, probe=hub_reachable) -> list[str]:
    """The ids of `hub_refs` only the hub has; refused at once if the hub is off or silent (HubError); none:
    HF_HUB_OFFLINE=1 in `env`, so nothing can sit in a retry loop."""
    env = os.environ if env is None else env
    missing = needs_hub(cfg, env)
    check_hub(missing, env, probe)
    if not missing:
        env["HF_HUB_OFFLINE"] = "1"
    return missing


def prepare(cfg: dict[str, Any], output_dir: str | Path, env: dict[str, str] | None = None,
            probe=hub_reachable) -> HubPlan:
    """Write the model's config and the private hub cache under output_dir, check what needs the hub, and set the
    process environment (HF_HUB_CACHE; HF_HUB_OFFLINE=1 when nothing needs the hub). Call it before anything
    imports huggingface_hub (it reads both variables once, at import)."""
    env = os.environ if env is None else env
    root = Path(output_dir) / CACHE_DIR
    source, files = _config_files(cfg)
    model_dir = root / "model"
    for name, data in files.items():
        _write(model_dir / name, data)
    cache = root / "hub"
    cache.mkdir(parents=True, exist_ok=True)
    for repo_id in RECIPE_HUB_IDS:
        stage_entry(cache, repo_id, files)
    linked = 0
    user = user_hub_cache(env)
    if user.is_dir() and user.resolve() != cache.resolve():
        staged = {_entry(cache, r).name for r in RECIPE_HUB_IDS}
        for entry in sorted(user.glob("models--*")):
            link = cache / entry.name
            if entry.name in staged or link.exists() or link.is_symlink():
                continue
            with contextlib.suppress(FileExistsError):  # another rank made it meanwhile
                link.symlink_to(entry.resolve(), target_is_directory=True)
            linked += 1
    missing = settle_hub(cfg, env, probe)  # user_hub_cache(env) was read above: the private cache comes after
    env["HF_HUB_CACHE"] = str(cache)
    return HubPlan(cache=cache, model_dir=model_dir, source=source, needs_hub=missing, linked=linked)
