"""Refit config and layout rules, and the errors a user sees for a bad world size (no distributed run needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cloudai_mbridge.payload.refit import config as rc
from cloudai_mbridge.payload.refit.local import parse

pytestmark = pytest.mark.payload

MODEL = {"num_layers": 4, "hidden_size": 64, "ffn_hidden_size": 128, "moe_ffn_hidden_size": 32,
         "num_attention_heads": 4, "num_experts": 8, "vocab_size": 200, "seq_length": 64}


def cfg(**kw) -> rc.RefitConfig:
    return rc.from_dict({"model": MODEL, **kw})


def test_collocated_layout_uses_all_ranks_per_side():
    src, dst = rc.derive_layouts(cfg(src={"tp": 2, "ep": 2, "etp": 1}, dst={"tp": 1, "pp": 2, "ep": 4}), 8)
    assert (src.dp, src.edp, src.world, src.rank_offset) == (4, 4, 8, 0)
    assert (dst.dp, dst.edp, dst.etp, dst.world, dst.rank_offset) == (4, 1, 1, 8, 0)


def test_non_collocated_layout_defaults_to_tp_pp_ep_worlds():
    # etp defaults to tp (Megatron): tp8 ep8 -> 64 ranks, as in Megatron-LM's Kimi-K2 refit benchmark.
    src, dst = rc.derive_layouts(
        cfg(mode="non-collocated", src={"tp": 8, "ep": 8}, dst={"tp": 8, "ep": 4}, model={**MODEL, "num_experts": 384,
            "num_attention_heads": 64, "hidden_size": 7168, "moe_ffn_hidden_size": 2048, "ffn_hidden_size": 18432}),
        96,
    )
    assert (src.world, src.dp, dst.world, dst.rank_offset) == (64, 8, 32, 64)
    src, dst = rc.derive_layouts(cfg(mode="non-collocated", src={"tp": 2, "ep": 2, "etp": 1, "world": 4},
                                     dst={"tp": 1, "ep": 2}), 6)
    assert (src.world, src.edp, dst.world, dst.rank_offset) == (4, 2, 2, 4)
    # Megatron-LM's benchmark_refit sizes a side tp*pp*ep whatever its etp (8GPU_CONFIGS.md config 1: TP2 EP2 ETP1
    # is 4 GPUs), not the smallest grid that holds it (2 here)
    src, dst = rc.derive_layouts(cfg(mode="non-collocated", src={"tp": 2, "ep": 2, "etp": 1}, dst={"ep": 1}), 8)
    assert (src.world, src.dp, src.edp, dst.world, dst.tp, dst.rank_offset) == (4, 2, 2, 2, 2, 4)
    assert rc.idle_ranks(src, dst, 8) == range(6, 8) and rc.rank_span(rc.idle_ranks(src, dst, 8)) == "6-7"


def test_non_collocated_layout_leaves_the_rest_of_the_world_idle():
    """megatron-core's refit: "(None, None): Idle rank"; Megatron-LM's benchmark refuses only a world that is too
    small (seed 002: src + dst <= total)."""
    src, dst = rc.derive_layouts(cfg(mode="non-collocated", src={"tp": 2}, dst={"tp": 1, "etp": 1}), 5)
    assert (src.ranks, dst.ranks, rc.idle_ranks(src, dst, 5)) == (range(0, 2), range(2, 3), range(3, 5))
    src, dst = rc.derive_layouts(cfg(mode="non-collocated", src={"tp": 2}, dst={"tp": 2}), 4)
    assert rc.rank_span(rc.idle_ranks(src, dst, 4)) == "none"
    src, dst = rc.derive_layouts(cfg(src={"tp": 2}, dst={"tp": 1, "etp": 1}), 4)  # collocated: all ranks hold both
    assert not rc.idle_ranks(src, dst, 4)


def test_unset_destination_sizes_are_the_sources():
    """Megatron-LM: every --rl-inference-* size left unset is the training one, expert tensor parallelism included
    (the training side's etp, itself tp when unset), not the destination's own tp."""
    c = cfg(src={"tp": 4, "pp": 2, "ep": 2}, dst={"tp": 2})
    assert (c.dst.tp, c.dst.pp, c.dst.ep, c.dst.etp) == (2, 2, 2, 4)
    c = cfg(src={"tp": 4, "etp": 1, "ep": 2}, dst={"tp": 8})
    assert (c.dst.pp, c.dst.ep, c.dst.etp, c.src.etp) == (1, 2, 1, 1)
    c = cfg(src={}, dst={})
    assert (c.src.tp, c.src.pp, c.src.ep, c.src.etp, c.dst.etp) == (1, 1, 1, None, 1)
    assert cfg(dst={"tp": 2, "etp": 2}).dst.etp == 2
    # inherited as upstream inherits it: TP2 -> TP1 keeps experts split in two, which one destination rank cannot hold
    with pytest.raises(rc.ConfigError, match=r"dst: expert grid etp\*ep=2\*1=2 must divide tp\*dp=1\*1=1"):
        rc.derive_layouts(cfg(mode="non-collocated", src={"tp": 2}, dst={"tp": 1}), 3)


def test_padded_vocab_is_shared_by_both_sides():
    assert rc.padded_vocab_size(cfg(src={"tp": 2}, dst={"tp": 4})) == 512
    assert rc.padded_vocab_size(cfg(src={"tp": 1}, dst={"tp": 1})) == 256


@pytest.mark.parametrize(
    ("kw", "world", "needles"),
    [
        ({"src": {"tp": 2}, "dst": {"tp": 1}}, 3, ["src", "tp*", "WORLD_SIZE=3"]),
        ({"mode": "non-collocated", "src": {"tp": 2}, "dst": {"tp": 2}}, 3, ["WORLD_SIZE=3", "2 + 2", "at least 4"]),
        ({"src": {"tp": 1, "ep": 4}, "dst": {"tp": 1}}, 2, ["src", "etp*ep", "ep"]),
        ({"src": {"ep": 3}, "dst": {}}, 3, ["model.num_experts", "src.ep=3"]),
        ({"src": {}, "dst": {"tp": 3}}, 3, ["model.num_attention_heads", "dst.tp=3"]),
        ({"device": "cpu", "transport": "nccl"}, 1, ["transport='nccl'", "gloo"]),
        ({"src": {"tp": 1, "ep": 1, "world": 2}, "dst": {}}, 4, ["src.world=2", "collocated"]),
        ({"iterations": 0}, 1, ["iterations=0"]),
        ({"device": "cuda", "transport": "nixl", "coalesce_mib": 64}, 1, ["coalesce_mib=64", "'nixl'"]),
        ({"device": "cuda", "transport": "nvshmem", "coalesce_mib": 64}, 1, ["coalesce_mib=64", "'nvshmem'"]),
        ({"device": "cpu", "transport": "nixl"}, 1, ["transport='nixl'", "gloo"]),
        ({"profile": 1}, 1, ["profile=1", "true or false"]),
        ({"coalesce_overlap": "yes"}, 1, ["coalesce_overlap='yes'", "true or false"]),
        ({"executor": "replay"}, 1, ["executor='replay'", "coalesce_mib=0", "coalesce_mib > 0", "'megatron'"]),
        ({"executor": "fast", "coalesce_mib": 1}, 1, ["executor='fast'", "'replay'"]),
        ({"coalesce_schedule": "ring", "coalesce_mib": 1}, 1, ["coalesce_schedule='ring'", "'rounds', 'pairwise'"]),
        ({"coalesce_schedule": "pairwise"}, 1, ["coalesce_schedule='pairwise'", "coalesce_mib=0", "coalesce_mib > 0",
                                                "coalesce_schedule to 'rounds'"]),
        ({"coalesce_edge_mib": 64, "coalesce_mib": 64}, 1, ["coalesce_edge_mib=64", "coalesce_mib=64",
                                                            "below coalesce_mib"]),
        ({"coalesce_edge_mib": 8}, 1, ["coalesce_edge_mib=8", "coalesce_mib=0"]),
        ({"coalesce_edge_mib": -1, "coalesce_mib": 64}, 1, ["coalesce_edge_mib"]),
    ],
)
def test_config_errors_name_field_value_and_fix(kw, world, needles):
    with pytest.raises(rc.ConfigError) as err:
        rc.derive_layouts(cfg(**kw), world)
    for needle in needles:
        assert needle in str(err.value), str(err.value)


def test_unknown_keys_are_rejected():
    with pytest.raises(rc.ConfigError, match="unknown key"):
        rc.from_dict({"model": {**MODEL, "hidden": 3}})


def test_cli_flags_override_the_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model": MODEL, "src": {"tp": 2}, "verify": True}))
    loaded = rc.load(["--config", str(path), "--src-tp", "1", "--dst-ep", "2", "--hidden-size", "128",
                      "--verify", "false", "--num-query-groups", "null"])
    assert (loaded.src.tp, loaded.dst.ep, loaded.model.hidden_size, loaded.verify) == (1, 2, 128, False)
    assert loaded.model.num_query_groups is None and loaded.model.num_layers == 4


def test_bad_world_size_exits_with_a_message_naming_the_field(tmp_path):
    """The real entry point, one process claiming WORLD_SIZE=3: it must refuse before any rendezvous."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model": MODEL, "src": {"tp": 2}, "dst": {"tp": 1}, "mode": "collocated"}))
    proc = subprocess.run(
        [sys.executable, "-m", "cloudai_mbridge.payload.refit", "--config", str(path)],
        env={**os.environ, "RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    error = parse(proc.stdout)["refit_error"]
    assert error["phase"] == "config"
    assert "src.tp*src.pp" in proc.stdout and "WORLD_SIZE=3" in proc.stdout
    assert "REFIT_RESULT" not in proc.stdout


def test_nvshmem_gets_the_cta_limit_megatron_core_insists_on():
    """Without NVSHMEM_MAX_CTAS=2 Megatron-Core's NVSHMEM service stops at planning ("NVSHMEM_MAX_CTAS must be set to
    '2'", 4 x H100, 2026-11-28); the payload sets it, leaves a user's own value alone, and touches nothing for the
    other transports."""
    from cloudai_mbridge.payload.refit.__main__ import transport_env

    env: dict[str, str] = {}
    transport_env("nvshmem", env)
    assert env == {"NVSHMEM_MAX_CTAS": "2"}
    mine = {"NVSHMEM_MAX_CTAS": "4"}
    transport_env("nvshmem", mine)
    assert mine == {"NVSHMEM_MAX_CTAS": "4"}
    for other in ("nccl", "gloo", "nixl"):
        env = {}
        transport_env(other, env)
        assert env == {}


def test_replay_executor_is_accepted_with_coalescing():
    rc.derive_layouts(cfg(executor="replay", coalesce_mib=1), 1)
    assert cfg().executor == "megatron"


def test_coalesce_schedule_defaults_to_rounds_and_takes_pairwise_from_the_cli():
    assert cfg().coalesce_schedule == "rounds"
    loaded = rc.load(["--coalesce-mib", "1", "--coalesce-schedule", "pairwise"])
    assert (loaded.coalesce_mib, loaded.coalesce_schedule) == (1, "pairwise")
    rc.validate(loaded)
