"""The training payload's config handling and the Megatron-Bridge overrides it derives, on configs written by the real
generator (launch/training.py `training_config`), so the payload and the generator agree on every key."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from cloudai_mbridge.catalog import get_gpu, get_model
from cloudai_mbridge.launch.training import training_config
from cloudai_mbridge.payload.train import __main__ as train
from cloudai_mbridge.payload.train import bridge as train_bridge
from cloudai_mbridge.payload.train import config as tc
from cloudai_mbridge.plan import CUDA_GRAPH_IMPLS, DEEPEP_IMPLS, DISPATCHERS, PRECISIONS, RECOMPUTE, TrainingPlan
from cloudai_mbridge.plan.training import EchoOptions

JOB = {"engine": "auto", "data": "mock", "hf_model_id": None, "checkpoint_dir": None, "seed": 1234,
       "log_interval": 1, "output_dir": "/results/run"}


def make_cfg(model: str = "kimi_k2_proxy", job: dict | None = None, **plan) -> dict:
    """A config exactly as the generator writes it (JSON round trip included)."""
    defaults = {"num_nodes": 1, "gpus_per_node": 8, "ep": 8, "gbs": 16}
    p = TrainingPlan(model=get_model(model), gpu=get_gpu(plan.pop("gpu", "h100")), **{**defaults, **plan})
    raw = training_config(p, **{**JOB, "hf_model_id": get_model(model).hf_id, **(job or {})})
    return json.loads(json.dumps(raw))


# The (PP, VP) layouts of Megatron-Bridge 0.4.2 recipes/deepseek/deepseek_v3.py for 61 layers, written out.
def _dsv3_table(tail: list[str]) -> dict[tuple[int, int], list[list[str]]]:
    d = "decoder"
    return {
        (4, 1): [["embedding"] + [d] * 16, [d] * 16, [d] * 16, [d] * 13 + tail],
        (8, 1): [["embedding"] + [d] * 8] + [[d] * 8] * 6 + [[d] * 5 + tail],
        (4, 2): [["embedding"] + [d] * 8] + [[d] * 8] * 6 + [[d] * 5 + tail],
        (16, 1): [["embedding"] + [d] * 4] + [[d] * 4] * 14 + [[d, *tail]],
        (8, 2): [["embedding"] + [d] * 4] + [[d] * 4] * 14 + [[d, *tail]],
        (4, 4): [["embedding"] + [d] * 4] + [[d] * 4] * 14 + [[d, *tail]],
    }


@pytest.mark.parametrize("model", ["kimi_k2", "deepseek_v3", "kimi_k2_proxy", "deepseek_v3_proxy"])
def test_generator_config_is_accepted(model):
    cfg = tc.check_config(make_cfg(model))
    assert cfg["model"]["name"] == model
    assert cfg["engine"] == "auto" and cfg["use_distributed_optimizer"] is None


def test_enumerations_match_the_plan():
    assert tc.DISPATCHERS == DISPATCHERS
    assert tc.DEEPEP_IMPLS == DEEPEP_IMPLS
    assert tc.PRECISIONS == PRECISIONS
    assert tc.RECOMPUTE == RECOMPUTE
    assert tc.CUDA_GRAPH_IMPLS == CUDA_GRAPH_IMPLS


@pytest.mark.parametrize("key", ["dispatcher", "mtp_num_layers", "seq_length", "echo"])
def test_missing_key_is_named(key):
    raw = make_cfg()
    del raw[key]
    with pytest.raises(tc.ConfigError, match=rf"missing key\(s\) {key}\b"):
        tc.check_config(raw)


def test_missing_model_fact_is_named():
    raw = make_cfg()
    del raw["model"]["num_experts"]
    with pytest.raises(tc.ConfigError, match=r"model is missing key\(s\) num_experts"):
        tc.check_config(raw)


def test_unknown_dispatcher_lists_the_allowed_ones():
    with pytest.raises(tc.ConfigError, match="dispatcher = 'nccl' is not one of alltoall, deepep, hybridep"):
        tc.check_config({**make_cfg(), "dispatcher": "nccl"})


def test_every_bad_value_is_reported_at_once():
    raw = {**make_cfg(), "engine": "fast", "tp": 0, "vp": -1, "mtp_num_layers": True, "deepep_impl": "amd"}
    with pytest.raises(tc.ConfigError) as err:
        tc.check_config(raw)
    for part in ("engine = 'fast'", "tp = 0", "vp = -1", "mtp_num_layers = True", "deepep_impl = 'amd'"):
        assert part in str(err.value)


def test_sft_needs_a_checkpoint():
    with pytest.raises(tc.ConfigError, match="task = 'sft' needs checkpoint_dir"):
        tc.check_config(make_cfg("kimi_k2", task="sft"))
    assert tc.check_config(make_cfg("kimi_k2", task="sft", job={"checkpoint_dir": "/ckpt/k2"}))["task"] == "sft"


def test_load_config_errors_name_the_file(tmp_path):
    with pytest.raises(tc.ConfigError, match="cannot read the training config"):
        tc.load_config(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(tc.ConfigError, match=r"bad\.json is not valid JSON"):
        tc.load_config(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(make_cfg()))
    assert tc.load_config(good)["dispatcher"] == "alltoall"


@pytest.mark.parametrize(
    ("requested", "bridge", "selected"),
    [("auto", True, "bridge"), ("auto", False, "mcore"), ("mcore", True, "mcore"), ("bridge", True, "bridge")],
)
def test_engine_selection(requested, bridge, selected):
    assert tc.select_engine(requested, bridge) == selected


def test_engine_bridge_without_bridge_is_an_error():
    with pytest.raises(tc.ConfigError, match=r"megatron\.bridge cannot be imported"):
        tc.select_engine("bridge", False)


def test_bridge_is_not_installed_here():
    """The CPU test machine has Megatron-Core but not Megatron-Bridge: auto must pick mcore here."""
    assert train_bridge.available() is False
    assert tc.select_engine("auto", train_bridge.available()) == "mcore"


def _single_process(monkeypatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
        monkeypatch.delenv(name, raising=False)


def test_main_reports_config_errors(tmp_path, capsys, monkeypatch):
    _single_process(monkeypatch)
    path = tmp_path / "mbridge_config.json"
    path.write_text(json.dumps({**make_cfg(), "engine": "bridge", "world_size": 1}))
    assert train.main(["--config", str(path)]) == train.EXIT_CONFIG
    assert "MBRIDGE_CONFIG_ERROR engine = 'bridge' but megatron.bridge cannot be imported" in capsys.readouterr().err
    raw = make_cfg()
    del raw["gbs"]
    path.write_text(json.dumps(raw))
    assert train.main(["--config", str(path)]) == train.EXIT_CONFIG
    assert "missing key(s) gbs" in capsys.readouterr().err


def test_main_checks_the_world_size(tmp_path, capsys, monkeypatch):
    _single_process(monkeypatch)
    path = tmp_path / "mbridge_config.json"
    path.write_text(json.dumps(make_cfg()))  # world_size 8, one process started
    assert train.main(["--config", str(path)]) == train.EXIT_CONFIG
    assert "world_size = 8 in the config but 1 processes were started" in capsys.readouterr().err


def test_rank_0_records_its_software_and_the_reports_read_it_back(tmp_path, capsys, monkeypatch):
    """MBRIDGE_VERSIONS (payload/versions.py) is printed by rank 0 before the engine runs; the pages' provenance
    (reports/provenance.py) reads it from rank-0.log."""
    import platform

    import torch

    from cloudai_mbridge.payload.train import mcore as train_mcore
    from cloudai_mbridge.reports.provenance import recorded_versions

    _single_process(monkeypatch)
    monkeypatch.setattr(train_mcore, "run", lambda cfg, dist: print("ENGINE RAN", flush=True))
    path = tmp_path / "mbridge_config.json"
    path.write_text(json.dumps({**make_cfg(ep=1, gpus_per_node=1, gbs=1), "engine": "mcore", "world_size": 1}))
    assert train.main(["--config", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines.index(next(ln for ln in lines if ln.startswith("MBRIDGE_VERSIONS {"))) < lines.index("ENGINE RAN")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank-0.log").write_text(out)
    recorded = recorded_versions(tmp_path)
    assert recorded["torch"] == torch.__version__ and recorded["python"] == platform.python_version()
    assert recorded["megatron_core"] and recorded["host"] == platform.node()
    assert recorded["date_utc"].startswith("20")


def test_config_line_is_one_json_line():
    cfg = tc.check_config(make_cfg())
    line = train.config_line(cfg)
    assert line.startswith("MBRIDGE_CONFIG {") and "\n" not in line
    assert json.loads(line.removeprefix("MBRIDGE_CONFIG ")) == cfg


@pytest.mark.parametrize(("value", "megatron"), [(None, None), (0, None), (1, 1), (2, 2)])
def test_mtp_zero_means_none(value, megatron):
    assert tc.megatron_mtp_layers({"mtp_num_layers": value}) == megatron


@pytest.mark.parametrize(("mtp", "tail"), [(1, ["mtp", "loss"]), (None, ["loss"])])
def test_derived_layout_reproduces_the_recipe_table(mtp, tail):
    for (pp, vp), layout in _dsv3_table(tail).items():
        assert tc.derived_pipeline_layout(61, pp * vp, mtp) == layout, (pp, vp)


def test_derived_layout_for_proxies_and_its_limits():
    assert tc.derived_pipeline_layout(4, 2, None) == [["embedding", "decoder", "decoder"],
                                                      ["decoder", "decoder", "loss"]]
    assert tc.derived_pipeline_layout(4, 4, 1) == [["embedding", "decoder"], ["decoder"], ["decoder"],
                                                   ["decoder", "mtp", "loss"]]
    with pytest.raises(tc.ConfigError, match="4 decoder layers cannot be split over 8 pipeline stages"):
        tc.derived_pipeline_layout(4, 8, None)


def test_layout_source():
    assert tc.pipeline_layout(tc.check_config(make_cfg())) == ("none", None)
    assert tc.pipeline_layout(tc.check_config(make_cfg(pp=2, ep=4)))[0] == "derived"
    full = tc.check_config(make_cfg("kimi_k2", num_nodes=32, tp=8, pp=8, ep=32, gbs=256))
    assert tc.pipeline_layout(full) == ("recipe", None)
    explicit = {**full, "pipeline_layout": "Et*8|t*8|t*8|t*8|t*8|t*8|t*8|t*5L"}
    assert tc.pipeline_layout(explicit) == ("explicit", "Et*8|t*8|t*8|t*8|t*8|t*8|t*8|t*5L")


def test_bridge_overrides_for_the_seed_kimi_k2_ab_point():
    """Seed 000's measured cell: TP8/PP8/VP2/EP32, mbs 4, gbs 256, a2a overlap on, UCCL DeepEP, balanced routing."""
    cfg = tc.check_config(make_cfg(
        "kimi_k2", gpu="b300", network="efa", num_nodes=32, tp=8, pp=8, vp=2, ep=32, mbs=4, gbs=256,
        dispatcher="deepep", deepep_impl="uccl", moe_a2a_overlap=True, force_balanced_routing=True,
        recompute="selective", recompute_modules=("mla_up_proj", "layernorm"), train_iters=24,
    ))
    o = tc.bridge_overrides(cfg)
    assert {k: o[k] for k in (
        "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
        "model.virtual_pipeline_model_parallel_size", "model.expert_model_parallel_size",
        "model.expert_tensor_parallel_size", "model.context_parallel_size", "model.sequence_parallel",
        "model.seq_length", "train.micro_batch_size", "train.global_batch_size", "train.train_iters",
    )} == {
        "model.tensor_model_parallel_size": 8, "model.pipeline_model_parallel_size": 8,
        "model.virtual_pipeline_model_parallel_size": 2, "model.expert_model_parallel_size": 32,
        "model.expert_tensor_parallel_size": 1, "model.context_parallel_size": 1, "model.sequence_parallel": True,
        "model.seq_length": 4096, "train.micro_batch_size": 4, "train.global_batch_size": 256,
        "train.train_iters": 24,
    }
    # K2 has no MTP: None, never 0 (0 trips the a2a-overlap assert); overlap needs the shared-expert overlap off.
    assert o["model.mtp_num_layers"] is None
    assert o["model.overlap_moe_expert_parallel_comm"] is True
    assert o["comm_overlap.overlap_moe_expert_parallel_comm"] is True
    assert o["model.delay_wgrad_compute"] is False and o["comm_overlap.delay_wgrad_compute"] is False
    assert o["model.moe_shared_expert_overlap"] is False
    assert o["model.moe_router_force_load_balancing"] is True
    assert o["model.recompute_granularity"] == "selective"
    assert o["model.recompute_modules"] == ["mla_up_proj", "layernorm"]
    assert o["model.recompute_method"] is None and o["model.recompute_num_layers"] is None
    assert o["logger.log_throughput"] is True and o["logger.log_interval"] == 1
    assert o["checkpoint.save"] is None and o["checkpoint.load"] is None
    assert o["checkpoint.pretrained_checkpoint"] is None
    assert o["validation.eval_iters"] == 0
    assert "ddp.use_distributed_optimizer" not in o  # the recipe's (Muon needs it off)
    assert tc.bridge_overrides({**cfg, "use_distributed_optimizer": False})["ddp.use_distributed_optimizer"] is False
    # A full model keeps its Hugging Face architecture: no shape overrides.
    assert "model.num_moe_experts" not in o and "tokenizer.vocab_size" not in o


def test_bridge_overrides_for_a_proxy_carry_its_shape():
    cfg = tc.check_config(make_cfg("deepseek_v3_proxy", mtp_num_layers=0, recompute="full"))
    o = tc.bridge_overrides(cfg)
    assert o["model.num_layers"] == 4 and o["model.num_moe_experts"] == 16 and o["model.moe_router_topk"] == 4
    assert o["model.moe_layer_freq"] == [0, 1, 1, 1]
    assert o["model.moe_shared_expert_intermediate_size"] == 768
    assert (o["model.q_lora_rank"], o["model.kv_lora_rank"], o["model.v_head_dim"]) == (512, 256, 128)
    assert (o["model.moe_router_num_groups"], o["model.moe_router_group_topk"]) == (4, 2)
    assert o["model.vocab_size"] == 32768 and o["tokenizer.vocab_size"] == 32768
    assert o["model.mtp_num_layers"] is None  # the explicit 0 override
    assert (o["model.recompute_granularity"], o["model.recompute_method"], o["model.recompute_num_layers"]) == (
        "full", "uniform", 1)
    assert o["model.moe_shared_expert_overlap"] is True  # all-to-all without a2a overlap: the recipe's default


def test_sft_points_at_the_pretrained_checkpoint():
    cfg = tc.check_config(make_cfg("kimi_k2", task="sft", num_nodes=32, tp=8, pp=8, ep=32, gbs=256,
                                   job={"checkpoint_dir": "/fsx/k2/mcore", "data": "/fsx/data/sft"}))
    o = tc.bridge_overrides(cfg)
    assert o["checkpoint.pretrained_checkpoint"] == "/fsx/k2/mcore" and o["checkpoint.load"] is None


def test_echo_fields():
    cfg = tc.check_config(make_cfg(
        gpu="b300", dispatcher="hybridep", precision="mxfp8",
        echo=EchoOptions(num_echo_experts=32, received_token_capacity=2.0, device_initiated_grouped_gemm=True,
                         recompute_expert_dispatch=True),
    ))
    assert tc.echo_fields(cfg) == {
        "moe_enable_echo": True, "moe_num_echo_experts": 32, "moe_echo_expert_dispatcher_type": "hybridep",
        "moe_use_device_initiated_grouped_gemm": True, "moe_echo_recompute_expert_dispatch": True,
        "moe_received_token_capacity": 2.0,
    }
    assert tc.bridge_overrides(cfg)["model.moe_num_echo_experts"] == 32
    assert tc.echo_fields(tc.check_config(make_cfg())) == {}
    with pytest.raises(tc.ConfigError, match=r"moe_enable_echo.*Megatron-MoE-Echo"):
        tc.missing_echo_fields(cfg, {"num_moe_experts"}, "megatron-core 0.16.1")


def test_bridge_recipe_choice():
    assert tc.bridge_recipe(tc.check_config(make_cfg("kimi_k2")), kimi_recipe_available=True) == "kimi_k2"
    assert tc.bridge_recipe(tc.check_config(make_cfg("kimi_k2")), False) == "deepseek_v3+autobridge"
    assert tc.bridge_recipe(tc.check_config(make_cfg("kimi_k2_proxy")), True) == "deepseek_v3"
    assert tc.bridge_recipe(tc.check_config(make_cfg("deepseek_v3")), True) == "deepseek_v3"


def test_precision_presets_cover_every_precision():
    assert set(tc.BRIDGE_PRECISION_RECIPES) == set(tc.PRECISIONS)


def test_mcore_engine_limits():
    assert tc.mcore_unsupported(tc.check_config(make_cfg())) == []
    problems = tc.mcore_unsupported(tc.check_config(make_cfg(
        pp=2, vp=2, cp=2, ep=2, gpu="b300", precision="mxfp8", moe_a2a_overlap=True, cuda_graph_impl="local",
        job={"data": "/data/prefix"},
    )))
    for part in ("pp = 2", "vp = 2", "cp = 2", "precision = 'mxfp8'", "moe_a2a_overlap", "cuda_graph_impl = 'local'",
                 "data = '/data/prefix'"):
        assert any(part in p for p in problems), part
    assert all("engine = 'bridge'" in p for p in problems)
    tp2 = tc.mcore_unsupported(tc.check_config(make_cfg(tp=2, ep=4)))
    assert len(tp2) == 1 and "tp = 2: MoE with tensor parallelism needs sequence parallelism" in tp2[0]


def test_padded_vocab():
    assert tc.padded_vocab_size(32768, 1) == 32768
    assert tc.padded_vocab_size(32769, 2) == 33024
    assert tc.padded_vocab_size(163840, 8) == 163840


def test_set_fields_refuses_unknown_fields():
    container = SimpleNamespace(model=SimpleNamespace(tensor_model_parallel_size=1), train=None)
    train_bridge.set_fields(container, {"model.tensor_model_parallel_size": 8})
    assert container.model.tensor_model_parallel_size == 8
    with pytest.raises(tc.ConfigError, match="no field 'moe_enable_echo'"):
        train_bridge.set_fields(container, {"model.moe_enable_echo": True})
    with pytest.raises(tc.ConfigError, match="no 'train' section"):
        train_bridge.set_fields(container, {"train.train_iters": 3})


def test_fit_warmup_keeps_warmup_below_decay():
    container = SimpleNamespace(scheduler=SimpleNamespace(lr_warmup_iters=2000, lr_decay_iters=None))
    train_bridge._fit_warmup(container, 20)
    assert container.scheduler.lr_warmup_iters == 19
    kimi = SimpleNamespace(scheduler=SimpleNamespace(lr_warmup_iters=2000, lr_decay_iters=1_000_000))
    train_bridge._fit_warmup(kimi, 20)
    assert kimi.scheduler.lr_warmup_iters == 2000


def test_mock_and_pretrain_data():
    def container():
        ds = SimpleNamespace(blend=(["old"], None), blend_per_split=None, data_path="old", seq_length=1, random_seed=0)
        return SimpleNamespace(dataset=ds)

    mock = container()
    train_bridge._apply_data(tc.check_config(make_cfg()), mock)
    assert (mock.dataset.blend, mock.dataset.data_path, mock.dataset.seq_length, mock.dataset.random_seed) == (
        None, None, 4096, 1234)
    real = container()
    train_bridge._apply_data(tc.check_config(make_cfg(job={"data": "/data/tokens_text_document"})), real)
    assert real.dataset.blend == (["/data/tokens_text_document"], None)


def test_identity_check_catches_a_wrong_provider():
    cfg = tc.check_config(make_cfg("kimi_k2"))
    right = SimpleNamespace(num_layers=61, hidden_size=7168, num_attention_heads=64, num_moe_experts=384,
                            moe_router_topk=8)
    train_bridge._check_identity(cfg, right)
    wrong = SimpleNamespace(**{**vars(right), "num_moe_experts": 256, "num_attention_heads": 128})
    with pytest.raises(tc.ConfigError, match=r"num_attention_heads = 128 \(catalog 64\).*num_moe_experts = 256"):
        train_bridge._check_identity(cfg, wrong)


def test_the_staged_package_runs_alone(tmp_path):
    """As launch/payload.py stages it: payload/**/*.py copied to <run>/mbridge_payload, started with python3 -m."""
    import subprocess
    import sys

    from cloudai_mbridge.launch.payload import payload_argv, stage_payload, write_config

    stage_payload(tmp_path)
    config = write_config(tmp_path, {**make_cfg(), "engine": "bridge", "world_size": 1})
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")}
    env["PYTHONPATH"] = str(tmp_path)
    train_run = subprocess.run(payload_argv(sys.executable, "train", config), cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=120)
    assert train_run.returncode == train.EXIT_CONFIG, train_run.stderr
    assert "MBRIDGE_CONFIG_ERROR engine = 'bridge'" in train_run.stderr
    convert_run = subprocess.run(payload_argv(sys.executable, "convert", config), cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=120)
    assert convert_run.returncode == 2 and "conversion needs hf_model_id" in convert_run.stderr  # a proxy has none


def test_shared_expert_overlap_follows_the_recipes_unless_the_config_says():
    recipes = {d: tc.bridge_overrides(tc.check_config(make_cfg(dispatcher=d)))["model.moe_shared_expert_overlap"]
               for d in ("alltoall", "deepep")}
    assert recipes == {"alltoall": True, "deepep": False}
    held = tc.check_config(make_cfg(dispatcher="alltoall", moe_shared_expert_overlap=False))
    assert held["moe_shared_expert_overlap"] is False  # the generator carries an explicit choice
    assert tc.bridge_overrides(held)["model.moe_shared_expert_overlap"] is False
    assert "moe_shared_expert_overlap" not in make_cfg(dispatcher="alltoall")  # and nothing otherwise
    bad = {**make_cfg(dispatcher="deepep"), "moe_shared_expert_overlap": True}
    with pytest.raises(tc.ConfigError, match="moe_shared_expert_overlap = true needs dispatcher = 'alltoall'"):
        tc.check_config(bad)


def test_cuda_graphs_get_what_bridge_asserts_for_them():
    """Bridge's provide() asserts TE's RNG tracker for any CUDA graph; validate() refuses a full-iteration graph while
    the rerun state machine checks the loss for NaN. NVIDIA's GB200 configurations run TE graphs."""
    te = tc.check_config(make_cfg("deepseek_v3_proxy", cuda_graph_impl="transformer_engine",
                                  cuda_graph_scope=("attn", "moe_router", "moe_preprocess")))
    o = tc.bridge_overrides(te)
    assert o["rng.te_rng_tracker"] is True and "rerun_state_machine.check_for_nan_in_loss" not in o
    full = tc.bridge_overrides(tc.check_config(make_cfg("deepseek_v3_proxy", cuda_graph_impl="local",
                                                        cuda_graph_scope=("full_iteration",))))
    assert full["rng.te_rng_tracker"] is True and full["rerun_state_machine.check_for_nan_in_loss"] is False
    none = tc.bridge_overrides(tc.check_config(make_cfg("deepseek_v3_proxy")))
    assert "rng.te_rng_tracker" not in none


def test_no_lr_keeps_the_recipes_schedule():
    """lr unset: no key in the generator's config, and no optimizer.* / scheduler.* override (the recipe's schedule)."""
    cfg = make_cfg("deepseek_v3_proxy")
    assert "lr" not in cfg
    checked = tc.check_config(cfg)
    assert checked["lr"] is None
    assert not [k for k in tc.bridge_overrides(checked) if k.startswith(("optimizer.", "scheduler."))]
    assert tc.constant_lr_fields(checked) == {}


def test_lr_is_a_constant_learning_rate_without_warmup():
    cfg = tc.check_config(make_cfg("deepseek_v3_proxy", job={"lr": 1e-5}))
    out = tc.bridge_overrides(cfg)
    assert out["optimizer.lr"] == out["optimizer.min_lr"] == 1e-5
    assert out["scheduler.lr_warmup_iters"] == 0 and out["scheduler.lr_warmup_fraction"] is None
    assert out["scheduler.lr_decay_style"] == "constant"
    # set on a recipe-like container, and _fit_warmup (after the overrides in build_container) leaves it so
    container = SimpleNamespace(
        optimizer=SimpleNamespace(lr=3e-4, min_lr=3e-5),
        scheduler=SimpleNamespace(lr_warmup_iters=2000, lr_decay_iters=None, lr_decay_style="cosine",
                                  lr_warmup_fraction=None),
    )
    train_bridge.set_fields(container, tc.constant_lr_fields(cfg))
    train_bridge._fit_warmup(container, cfg["train_iters"])
    assert (container.optimizer.lr, container.optimizer.min_lr) == (1e-5, 1e-5)
    assert (container.scheduler.lr_warmup_iters, container.scheduler.lr_decay_style) == (0, "constant")
    assert train_bridge.lr_report(cfg, container) == \
        "MBRIDGE_LR lr=1e-05 min_lr=1e-05 warmup_iters=0 decay_style=constant source=config"


def test_the_recipes_schedule_is_reported_after_fit_warmup():
    cfg = tc.check_config(make_cfg("deepseek_v3_proxy"))
    container = SimpleNamespace(
        optimizer=SimpleNamespace(lr=3e-4, min_lr=3e-5),
        scheduler=SimpleNamespace(lr_warmup_iters=2000, lr_decay_iters=None, lr_decay_style="cosine"),
    )
    train_bridge._fit_warmup(container, 20)
    assert train_bridge.lr_report(cfg, container) == \
        "MBRIDGE_LR lr=0.0003 min_lr=3e-05 warmup_iters=19 decay_style=cosine source=recipe"


@pytest.mark.parametrize("bad", [0, -1, "x", float("nan"), float("inf"), 2.0, True])
def test_a_bad_lr_is_refused_naming_the_field(bad):
    cfg = make_cfg("deepseek_v3_proxy")
    cfg["lr"] = bad
    with pytest.raises(tc.ConfigError, match=r"lr = .* must be null or a finite number > 0 and <= 1") as e:
        tc.check_config(cfg)
    assert "\n" not in str(e.value) and repr(bad) in str(e.value)


def test_mcore_uses_the_configs_lr():
    from cloudai_mbridge.payload.train import mcore

    assert mcore.learning_rate(tc.check_config(make_cfg("deepseek_v3_proxy"))) == mcore.LEARNING_RATE
    assert mcore.learning_rate(tc.check_config(make_cfg("deepseek_v3_proxy", job={"lr": 2e-5}))) == 2e-5
