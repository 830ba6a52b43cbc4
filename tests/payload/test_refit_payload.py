"""The refit payload for real: 4 gloo ranks on the CPU, real Megatron-Core GPT MoE models, real swap_model_weights.

Every passing case is checked twice: by the payload's own verification (REFIT_VERIFY) and here, independently, from
the shards every rank dumps (`dump_shards`): we un-shard both sides ourselves and compare them bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from forked_ranks import launch_forked

from cloudai_mbridge.payload.refit.local import LocalRun, config_text, launch

pytestmark = pytest.mark.payload

WORLD = 4
MODEL = {
    "name": "moe-proxy-test", "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128, "moe_ffn_hidden_size": 32,
    "num_attention_heads": 4, "num_query_groups": 2, "num_experts": 8, "moe_router_topk": 2,
    "moe_shared_expert_intermediate_size": 64, "vocab_size": 200, "seq_length": 64,
}
INT_VIEW = {2: torch.int16, 4: torch.int32}


def config(src: dict, dst: dict, **extra) -> dict:
    model = {**MODEL, **extra.pop("model", {})}
    return {"model": model, "src": src, "dst": dst, "mode": "collocated", "transport": "gloo", "warmup": 1,
            "iterations": 2, "seed": 1, "verify": True, "timeout_s": 600, "device": "cpu", **extra}


def run(cfg: dict) -> LocalRun:
    """The payload on WORLD ranks, forked from one process that imported torch and Megatron-Core once (forked_ranks:
    the same module, argv, variables and gloo world as `launch`; `launch` itself runs the tests that name it)."""
    return launch_forked(cfg, WORLD, timeout=900)


def _positions(g: dict, local_len: int) -> torch.Tensor:
    """Megatron's strided TP split, written out again here on purpose (rank r holds pieces r, r+W, ...)."""
    per_stride = local_len // g["stride"]
    local = torch.arange(local_len)
    return ((local // per_stride) * g["tp_size"] + g["tp_rank"]) * per_stride + local % per_stride


def _assemble(pieces: list[dict]) -> torch.Tensor:
    first = pieces[0]
    if first["dim"] is None:
        return first["tensor"]
    full = torch.full(first["full_shape"], float("nan"), dtype=first["tensor"].dtype)
    for piece in pieces:
        full.index_copy_(piece["dim"], _positions(piece, piece["tensor"].shape[piece["dim"]]), piece["tensor"])
    return full


def independent_check(dump: Path) -> int:
    """Un-shard the dumped source and destination shards of all ranks and compare them bit for bit."""
    by_side: dict[str, dict[str, list[dict]]] = {"src": {}, "dst": {}}
    for path in sorted(dump.glob("rank*.pt")):
        for piece in torch.load(path, weights_only=False):
            by_side[piece["side"]].setdefault(piece["name"], []).append(piece)
    assert by_side["dst"], "no destination shards were dumped"
    assert set(by_side["src"]) == set(by_side["dst"])
    for name, dst_pieces in by_side["dst"].items():
        src, dst = _assemble(by_side["src"][name]), _assemble(dst_pieces)
        assert not torch.isnan(dst).any(), f"{name}: destination not fully written"
        view = INT_VIEW[src.element_size()]
        assert torch.equal(src.view(view), dst.view(view)), f"{name}: destination differs from source"
        assert src.abs().sum() > 0, f"{name}: source was never filled"
    return len(by_side["dst"])


def assert_verified(result: LocalRun, dump: Path) -> dict:
    assert result.failed_ranks() == [], result.describe()
    parsed = result.parsed
    assert parsed["refit_verify"]["status"] == "pass", result.out
    assert parsed["refit_verify"]["mismatched"] == "0"
    assert "gather" in parsed["refit_verify"]["detail"]
    checked = independent_check(dump)
    assert int(parsed["refit_verify"]["params"]) == checked
    final = parsed["refit_result"]
    assert len(parsed["iters"]) == 2 and final["refit_time_ms"]["median"] > 0
    assert {"Mean refit time", "Min refit time", "Max refit time", "Median refit time",
            "Effective bandwidth"} <= set(parsed["summary"])
    stats = {k: int(v) for k, v in parsed["refit_stats"].items()}
    # The plan writes every destination element exactly once, so the bytes it moves are the bytes held there.
    assert stats["bytes_remote"] + stats["bytes_local"] == final["held_bytes"]["dst"]
    assert stats["send_ops"] == stats["recv_ops"] > 0
    return final


def run_folder(folder: Path, cfg: dict, result: LocalRun) -> Path:
    """A run folder as a job leaves it (the config the ranks read, one log per rank), for the metrics to read back."""
    (folder / "logs").mkdir(parents=True)
    (folder / "mbridge_config.json").write_text(config_text(cfg))
    for rank, (out, err) in enumerate(zip(result.stdout, result.stderr, strict=True)):
        (folder / "logs" / f"rank-{rank}.log").write_text(out + err)
    return folder


@pytest.mark.parametrize(
    ("src", "dst", "extra", "adapter"),
    [
        pytest.param({"tp": 2, "ep": 1}, {"tp": 1, "ep": 1, "etp": 1}, {}, "not-needed", id="tp2-to-tp1"),
        pytest.param({"tp": 1, "ep": 4}, {"tp": 1, "ep": 2}, {}, "installed", id="ep4-to-ep2"),
        pytest.param({"tp": 2, "ep": 2, "etp": 1}, {"tp": 1, "ep": 4}, {}, "installed", id="tp2ep2-to-tp1ep4"),
        pytest.param({"tp": 1, "pp": 2, "ep": 2}, {"tp": 2, "pp": 1, "ep": 1, "etp": 1},
                     {"model": {"num_layers": 4}}, "installed", id="pp2ep2-to-tp2pp1"),
    ],
)
def test_collocated_refit_is_bit_exact(tmp_path, src, dst, extra, adapter):
    result = run(config(src, dst, dump_shards=str(tmp_path), **extra))
    final = assert_verified(result, tmp_path)
    assert final["adapter"] == adapter
    assert final["versions"]["megatron_core"]
    assert final["layout"]["src"]["world"] == final["layout"]["dst"]["world"] == WORLD


@pytest.mark.parametrize(
    ("src", "dst", "mode"),
    [
        pytest.param({"tp": 2, "ep": 2, "etp": 1}, {"tp": 1, "ep": 4}, "collocated", id="tp2ep2-to-tp1ep4"),
        pytest.param({"tp": 1, "ep": 2}, {"tp": 2, "ep": 1}, "non-collocated", id="non-collocated"),
    ],
)
def test_coalesced_transport_is_bit_exact_with_fewer_messages(tmp_path, src, dst, mode):
    result = run(config(src, dst, mode=mode, coalesce_mib=1, dump_shards=str(tmp_path)))
    final = assert_verified(result, tmp_path)
    assert final["config"]["coalesce_mib"] == 1 and final["config"]["coalesce_schedule"] == "rounds"
    (line,) = [x for x in result.stdout[0].splitlines() if x.startswith("REFIT_COALESCE ")]
    fields = dict(kv.split("=") for kv in line.split()[1:4])
    sends_rank0 = int(result.parsed["refit_stats"]["send_ops"])  # summed over ranks: an upper bound for rank 0
    # a model this small fits one 1 MiB message per peer: one round, at most one message per peer and direction
    assert fields["rounds"] == "1" and 0 < int(fields["messages"]) <= 2 * (WORLD - 1) < sends_rank0
    # every refit submits the same slices: the plan is built once (warm-up 1) and reused; CPU: no side streams
    assert "plan_builds=1 " in line and "overlapped=false" in line and "schedule=rounds " in line, line


def test_pairwise_schedule_is_bit_exact_one_peer_pair_at_a_time(tmp_path):
    """coalesce_schedule "pairwise" through the payload: 4 ranks, 1 MiB messages (one per peer and direction),
    so one exchange per step (3), each with one peer each way, and the same bits as megatron-core's plan says."""
    cfg = config({"tp": 2, "ep": 2, "etp": 1}, {"tp": 1, "ep": 4}, coalesce_mib=1, coalesce_schedule="pairwise",
                 dump_shards=str(tmp_path))
    result = run(cfg)
    final = assert_verified(result, tmp_path)
    assert final["config"]["coalesce_schedule"] == "pairwise"
    (line,) = [x for x in result.stdout[0].splitlines() if x.startswith("REFIT_COALESCE ")]
    fields = dict(kv.split("=") for kv in line.split()[1:7])
    assert fields["schedule"] == "pairwise", line
    assert 1 < int(fields["rounds"]) <= WORLD - 1 and 0 < int(fields["messages"]) <= 2 * (WORLD - 1), line


def test_edge_messages_reach_the_service_and_stay_bit_exact(tmp_path):
    """coalesce_edge_mib through the payload: the service cuts with it (its REFIT_COALESCE line says which), and
    every destination shard still matches megatron-core's plan bit for bit."""
    cfg = config({"tp": 2, "ep": 2, "etp": 1}, {"tp": 1, "ep": 4}, coalesce_mib=2, coalesce_edge_mib=1,
                 coalesce_schedule="pairwise", dump_shards=str(tmp_path))
    result = run(cfg)
    final = assert_verified(result, tmp_path)
    assert final["config"]["coalesce_edge_mib"] == 1
    (line,) = [x for x in result.stdout[0].splitlines() if x.startswith("REFIT_COALESCE ")]
    assert " edge_mib=1 " in line and " schedule=pairwise " in line, line


def test_non_collocated_refit_is_bit_exact(tmp_path):
    result = run(config({"tp": 1, "ep": 2}, {"tp": 2, "ep": 1}, mode="non-collocated", dump_shards=str(tmp_path)))
    final = assert_verified(result, tmp_path)
    assert final["layout"]["src"] == {"tp": 1, "pp": 1, "ep": 2, "etp": 1, "dp": 2, "edp": 1, "world": 2,
                                      "first_rank": 0}
    assert final["layout"]["dst"]["first_rank"] == 2
    # Source and destination live on different ranks: nothing can be a local copy.
    assert final["bytes_local"] == 0 and final["bytes_remote"] > 0


def test_non_collocated_refit_with_an_idle_rank_is_bit_exact(tmp_path):
    """3 of 4 ranks hold a side (src TP2 on 0-1, dst TP1 on 2); rank 3 idles as megatron-core's refit has an idle rank
    do: no model, but it takes part in the plan's gathers and the barriers (else every rank would hang)."""
    result = run(config({"tp": 2}, {"tp": 1, "etp": 1}, mode="non-collocated", dump_shards=str(tmp_path)))
    final = assert_verified(result, tmp_path)
    assert (final["layout"]["src"]["world"], final["layout"]["dst"]["first_rank"], final["world_size"]) == (2, 2, 4)
    assert result.parsed["refit_config"]["idle_ranks"] == final["idle_ranks"] == "3"
    assert "rank 3 idle" in result.stderr[3] and all("idle" not in e for e in result.stderr[:3])


def test_profile_adds_one_untimed_refit_and_a_summary_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MBRIDGE_REFIT_PROFILE", "1")
    result = launch_forked(config({"tp": 2}, {"tp": 1}, dump_shards=str(tmp_path)), 2, timeout=240)
    assert_verified(result, tmp_path)  # two timed refits: the profiled one is not among them
    (line,) = [x for x in result.stdout[0].splitlines() if x.startswith("REFIT_PROFILE ")]
    fields = dict(kv.split("=") for kv in line.split()[1:])
    assert set(fields) == {"wall_ms", "nccl_ms", "copy_ms", "other_ms", "kernels"}
    assert float(fields["wall_ms"]) > 0 and fields["kernels"] == "0"  # gloo on the CPU: no device kernels
    assert "Self CPU" in result.stderr[0]
    assert not any("REFIT_PROFILE" in out for out in result.stdout[1:])  # rank 0 only


@pytest.mark.parametrize(
    ("src", "dst", "code", "symptom"),
    [
        pytest.param({"tp": 1, "ep": 4}, {"tp": 1, "ep": 2}, 3, "not found in source model", id="ep4-to-ep2"),
        pytest.param({"tp": 1, "ep": 2}, {"tp": 1, "ep": 2}, 1, "status=fail", id="ep2-to-ep2-silently-wrong"),
    ],
)
def test_unpatched_megatron_core_mis_plans_local_experts(src, dst, code, symptom):
    """Upstream bug, reproduced: the planner keys local-spec experts by their rank-local index."""
    result = run(config(src, dst, _no_adapter=True, timeout_s=60))
    assert result.returncodes[0] == code, result.describe()
    assert all(rc != 0 for rc in result.returncodes), result.describe()
    assert symptom in result.out, result.out
    assert "Mean refit time" not in result.out and not result.parsed["iters"]
    if code == 1:
        verdict = result.parsed["refit_verify"]
        # 8 experts, 2 per EP rank pair swapped: half of all expert weights (2 layers x 4 experts x 2) are wrong.
        assert int(verdict["mismatched"]) == 16 and "local_experts" in verdict["detail"]
        assert result.parsed["refit_result"]["refit_time_ms"] is None


def test_corrupted_destination_fails_verification():
    result = run(config({"tp": 2, "ep": 1}, {"tp": 1, "ep": 2}, _corrupt_after_refit=True))
    assert all(rc == 1 for rc in result.returncodes), result.describe()
    verdict = result.parsed["refit_verify"]
    assert verdict["status"] == "fail" and verdict["mismatched"] == "1", result.out
    assert not result.parsed["iters"] and not result.parsed["summary"]
    assert "Mean refit time" not in result.out and "REFIT_ITER" not in result.out
    final = result.parsed["refit_result"]
    assert final["refit_time_ms"] is None and final["bandwidth_gbps"] is None


def test_timeout_ends_every_rank():
    """timeout_s bounds the whole run on every rank, so a rank stuck in a collective cannot hold the job."""
    result = launch(config({"tp": 1}, {"tp": 1}, timeout_s=1), 2, timeout=60)
    assert result.returncodes == [4, 4], result.describe()
    assert "refit_error" in result.parsed and 'message="timed out after 1 s"' in result.out, result.out


def test_a_copy_service_that_sends_stale_weights_fails_at_the_refit_where_it_happens():
    """Between refits the source moves to a new version of its weights; a copy service that keeps sending the first
    refit's slices (the class of Megatron-LM #6823's stale local copies) leaves no NaN and the right bytes in the
    right places for the weights it kept: only the per-refit check against the latest version catches it."""
    result = run(config({"tp": 2, "ep": 1}, {"tp": 1, "ep": 2}, _stale_copy_service=True, coalesce_mib=1))
    assert all(rc == 1 for rc in result.returncodes), result.describe()
    verdict = result.parsed["refit_verify"]
    assert verdict["status"] == "fail", result.out
    assert "each-refit" in verdict["detail"] and "stale-after-iter=0" in verdict["detail"], verdict
    assert "nan-after-iter" not in verdict["detail"]
    assert result.parsed["refit_result"]["refit_time_ms"] is None


def test_the_same_layout_with_the_real_coalescing_service_sends_every_new_version():
    result = run(config({"tp": 2, "ep": 1}, {"tp": 1, "ep": 2}, coalesce_mib=1))
    assert all(rc == 0 for rc in result.returncodes), result.describe()
    verdict = result.parsed["refit_verify"]
    assert verdict["status"] == "pass" and "each-refit" in verdict["detail"], verdict
    assert "stale" not in verdict["detail"]


@pytest.mark.parametrize("coalesce_mib", [0, 1], ids=["gloo-service", "coalescing"])
def test_profile_prints_phases_that_the_parser_reads_and_stays_bit_exact(tmp_path, coalesce_mib):
    from cloudai_mbridge.metrics import parse_refit_run

    cfg = config({"tp": 2, "ep": 2, "etp": 1}, {"tp": 1, "ep": 4}, profile=True, coalesce_mib=coalesce_mib,
                 dump_shards=str(tmp_path / "shards"))
    result = run(cfg)
    final = assert_verified(result, tmp_path / "shards")
    assert final["config"]["profile"] is True
    (line,) = [x for x in result.out.splitlines() if x.startswith("REFIT_PHASES ")]
    folder = run_folder(tmp_path / "run", cfg, result)
    phases = parse_refit_run(folder).phases
    expected = {"submit", "run", "rest"} | ({"local", "pack", "comm", "unpack"} if coalesce_mib else set())
    assert phases is not None and set(phases) == expected, line
    assert all(v >= 0 for v in phases.values()) and phases["run"] > 0
    if coalesce_mib:  # the split covers run() (the clock reads in between are all that is left out)
        assert sum(phases[k] for k in ("local", "pack", "comm", "unpack")) <= phases["run"] * 1.01 + 0.5


def test_a_benchmark_run_folder_reads_back_as_the_run_that_happened(tmp_path):
    """benchmarks/gpu_refit_nccl.py keeps each run as a folder (config + rank logs). On 4 x H100 (2026-11-28) every
    such folder read back as `config_changed`: the script wrote the config pretty-printed after the run, the ranks had
    read it compact, and the digests differed. The folder must hold the bytes the ranks read."""
    import importlib.util
    import sys

    from cloudai_mbridge.metrics import parse_refit_run

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location("gpu_refit_nccl_under_test", bench / "gpu_refit_nccl.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(bench))
    cfg = config({"tp": 2}, {"tp": 1})
    result = launch(cfg, WORLD, timeout=900)  # the ranks as the benchmark starts them
    folder = tmp_path / "runs" / "refit"
    module.write_run_folder(folder, cfg, result)
    metrics = parse_refit_run(folder)
    assert metrics.status == "ok", metrics.problems
    assert metrics.verify is not None and metrics.verify.status == "pass"


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        # dst tp1 receives column slices of row-parallel weights (strided destination views)
        pytest.param({"tp": 2, "ep": 1}, {"tp": 1, "ep": 1}, id="tp2-to-tp1"),
        # src tp1 sends column slices (strided source views); experts ep2 -> ep1
        pytest.param({"tp": 1, "ep": 2}, {"tp": 2, "ep": 1}, id="tp1ep2-to-tp2ep1"),
    ],
)
def test_replay_executor_hands_strided_views_to_the_service_and_stays_bit_exact(tmp_path, src, dst):
    """executor "replay": the first refit goes through swap_model_weights, the second warm-up and every timed refit
    replay megatron-core's cached plan (views, no .contiguous() copies, no write-backs); each timed refit is checked
    against the version just sent, and the service's plan is built once (same signature as megatron-core's)."""
    cfg = config(src, dst, coalesce_mib=1, executor="replay", warmup=2, dump_shards=str(tmp_path / "shards"))
    result = run(cfg)
    final = assert_verified(result, tmp_path / "shards")
    assert final["config"]["executor"] == "replay"
    verdict = result.parsed["refit_verify"]
    assert "each-refit" in verdict["detail"] and "stale" not in verdict["detail"], verdict
    (line,) = [x for x in result.out.splitlines() if x.startswith("REFIT_EXECUTOR ")]
    fields = dict(kv.split("=") for kv in line.split()[1:])
    assert fields["name"] == "replay", line
    # the replay submits what megatron-core's executor submitted (every op of this model's plan is held here)
    assert int(fields["ops_send"]) == int(result.parsed["refit_stats"]["send_ops"]) > 0
    assert int(fields["ops_recv"]) == int(result.parsed["refit_stats"]["recv_ops"]) > 0
    (coalesce,) = [x for x in result.out.splitlines() if x.startswith("REFIT_COALESCE ")]
    assert "plan_builds=1 " in coalesce, coalesce  # warm-up 2 was a replay: same signature, same plan
    (strided,) = [x for x in result.stderr[0].splitlines() if x.startswith("[refit] replay: ")]
    counts = dict(kv.split("=") for kv in strided.split()[2:4])
    side = "strided_recv" if dst["tp"] == 1 else "strided_send"
    assert int(counts[side]) > 0, strided
    from cloudai_mbridge.metrics import parse_refit_run

    folder = run_folder(tmp_path / "run", cfg, result)
    metrics = parse_refit_run(folder)
    assert metrics.status == "ok", metrics.problems
    assert metrics.executor == {"name": "replay", "ops_send": int(fields["ops_send"]),
                                "ops_recv": int(fields["ops_recv"])}


def test_the_executor_line_parses_both_forms():
    from cloudai_mbridge.metrics import refit as refit_metrics

    m = refit_metrics._EXECUTOR_RE.search("REFIT_EXECUTOR name=replay ops_send=12 ops_recv=10")
    assert (m.group("name"), m.group("sends"), m.group("recvs")) == ("replay", "12", "10")
    m = refit_metrics._EXECUTOR_RE.search("REFIT_EXECUTOR fallback reason=transform")
    assert m.group("reason") == "transform" and m.group("name") is None


def test_replay_executor_still_catches_a_stale_copy_service():
    result = run(config({"tp": 2, "ep": 1}, {"tp": 1, "ep": 2}, _stale_copy_service=True, coalesce_mib=1,
                        executor="replay"))
    assert all(rc == 1 for rc in result.returncodes), result.describe()
    assert "REFIT_EXECUTOR name=replay " in result.out, result.out
    verdict = result.parsed["refit_verify"]
    assert verdict["status"] == "fail" and "stale-after-iter=0" in verdict["detail"], verdict


def test_executor_both_times_megatron_service_and_ours_in_one_job_against_one_ceiling(tmp_path):
    """executor "both": one job, the same 4 gloo ranks and models: Megatron-Core's own gloo service, then replay over
    the coalescing service (pairwise), then the exchange ceiling of the plan's own traffic; every refit of both is
    checked, and the run folder reads back with both series and the ceiling."""
    from cloudai_mbridge.metrics import parse_refit_run

    cfg = config({"tp": 2, "ep": 1}, {"tp": 1, "ep": 2}, coalesce_mib=1, executor="both",
                 coalesce_schedule="pairwise", dump_shards=str(tmp_path / "shards"))
    result = run(cfg)
    final = assert_verified(result, tmp_path / "shards")
    compare = final["compare"]
    assert len(compare["megatron"]["times_ms"]) == len(compare["ours"]["times_ms"]) == 2
    assert compare["ours"]["times_ms"] == final["refit_time_ms"]["all"]  # REFIT_ITER is ours
    assert compare["ours"]["schedule"] == "pairwise" and compare["megatron"]["service"] == "gloo"
    ceiling = compare["ceiling"]
    assert len(ceiling["times_ms"]) == 2 and ceiling["median_ms"] > 0
    assert ceiling["bytes_remote"] == int(result.parsed["refit_stats"]["bytes_remote"]) > 0
    # Megatron-Core's path ran its own service (no coalescing, no replay): one replay, one coalescing line, ours
    (executor,) = [x for x in result.out.splitlines() if x.startswith("REFIT_EXECUTOR ")]
    (coalesce,) = [x for x in result.out.splitlines() if x.startswith("REFIT_COALESCE ")]
    assert executor.startswith("REFIT_EXECUTOR name=replay ") and "schedule=pairwise" in coalesce
    paths = [x for x in result.out.splitlines() if x.startswith("REFIT_COMPARE ")]
    assert [p.split()[1] for p in paths[:3]] == ["path=megatron", "path=ours", "path=ceiling"], paths
    assert paths[-1].startswith("REFIT_COMPARE speedup=")
    # every refit of both paths was checked against the version it sent (versions run on across the two)
    assert "each-refit" in result.parsed["refit_verify"]["detail"]
    folder = run_folder(tmp_path / "run", cfg, result)
    metrics = parse_refit_run(folder)
    assert metrics.status == "ok", metrics.problems
    assert metrics.result["compare"]["megatron"]["times_ms"] == compare["megatron"]["times_ms"]
    from cloudai_mbridge.reports.refit_table import refit_row

    row = refit_row("t", 0, cfg, metrics, str(folder))  # what the refit page shows of this run
    assert row["megatron_n"] == row["ours_n"] == row["ceiling_n"] == 2
    assert row["speedup"] > 0 and row["speedup_verdict"] == "not distinguishable"  # n = 2 < 3 a side
    assert row["megatron_pct_of_ceiling"] > 0 and row["ours_pct_of_ceiling"] > 0
