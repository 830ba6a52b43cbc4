"""cloudai-mbridge dry-run of every scenario in conf/, through the real CLI and the real CloudAI."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CONF, dry_run, sbatch_scripts, write_case

# scenario -> (system, expected sweep points that produce a job)
SCENARIOS = {
    "kimi_k2_dispatcher_ab": ("slurm_b300_efa", 8),
    "dsv3_dispatcher_ab": ("slurm_b300_efa", 8),
    "dsv3_proxy_ncclep_ab": ("slurm_h100_ib", 4),
    "kimi_k2_sft": ("slurm_b300_efa", 1),
    "dsv3_sft": ("slurm_b300_efa", 1),
    "kimi_k2_refit": ("slurm_b300_efa", 7),
    "refit_cpu_smoke": ("local_slurm", 4),
    "refit_cpu_expected_rejection": ("local_slurm", 1),
    "seed001_refit_mappings": ("slurm_b300_efa", 3),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_dry_runs_to_sbatch_files(scenario: str, tmp_path: Path) -> None:
    system, expected = SCENARIOS[scenario]
    res = dry_run(CONF / "system" / f"{system}.toml", CONF / "test_scenario" / f"{scenario}.toml", tmp_path)
    assert res.returncode == 0, res.output
    scripts = sbatch_scripts(res.output_dir)
    assert len(scripts) == expected, res.output
    for script in scripts:
        text = script.read_text()
        entry = "refit" if "refit" in scenario else "train"
        assert "srun " in text and f"mbridge_payload.{entry} --config" in text
        run_dir = script.parent
        assert (run_dir / "mbridge_config.json").is_file()
        assert (run_dir / "mbridge_payload" / "dist_env.py").is_file(), "the payload must travel with the results"


def test_ab_points_differ_only_in_swept_fields(tmp_path: Path) -> None:
    import json

    res = dry_run(
        CONF / "system" / "slurm_b300_efa.toml", CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml", tmp_path
    )
    configs = [json.loads((s.parent / "mbridge_config.json").read_text()) for s in sbatch_scripts(res.output_dir)]
    cells = {(c["dispatcher"], c["mbs"], c["moe_a2a_overlap"]) for c in configs}
    assert len(cells) == 8
    for c in configs:
        assert (c["tp"], c["pp"], c["vp"], c["ep"], c["world_size"], c["dp"]) == (8, 8, 2, 32, 256, 4)
        assert c["model"]["num_experts"] == 384 and c["model"]["mtp_num_layers"] is None
    from cloudai_mbridge.reports.ab import VOLATILE_KEYS

    swept = {"dispatcher", "mbs", "moe_a2a_overlap"}
    stripped = {
        json.dumps({k: v for k, v in c.items() if k not in swept | VOLATILE_KEYS}, sort_keys=True) for c in configs
    }
    assert len(stripped) == 1, "A/B arms must be identical apart from the swept fields"


def test_rejected_points_are_skipped_with_the_reason(tmp_path: Path) -> None:
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2"\ngpu = "b300"\ntp = 8\npp = 8\nvp = 2\nep = [32, 7]\ngbs = 256\n'
        "moe_a2a_overlap = true\n",
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 32\n',
    )
    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", scenario, tmp_path)
    assert res.returncode == 0, res.output
    assert len(sbatch_scripts(res.output_dir)) == 1
    assert "[experts-per-ep] 384 experts cannot be split evenly over ep=7" in res.output
    assert "Fix: use an ep that divides the number of experts" in res.output


def test_gb200_deepep_is_rejected_not_downgraded(tmp_path: Path) -> None:
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "deepseek_v3"\ngpu = "gb200"\ntp = 4\npp = 8\nvp = 2\nep = 32\ngbs = 256\n'
        'dispatcher = ["alltoall", "deepep"]\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 64\n',
    )
    res = dry_run(CONF / "system" / "slurm_gb200_nvl72.toml", scenario, tmp_path)
    assert len(sbatch_scripts(res.output_dir)) == 1, "the alltoall arm runs, the deepep arm is skipped"
    rejected = [line for line in res.output.splitlines() if "rejected:" in line]
    assert len(rejected) == 1 and "[dispatcher-gpu]" in rejected[0] and 'dispatcher="deepep"' in rejected[0]
    assert "gb200" in rejected[0] and "hybridep" in rejected[0]


def test_a_single_point_that_megatron_rejects_fails_generation(tmp_path: Path) -> None:
    # Without a list there is no DSE and CloudAI never calls constraint_check: our generator refuses instead.
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2"\ngpu = "h100"\ntp = 3\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n',
    )
    res = dry_run(CONF / "system" / "slurm_h100_ib.toml", scenario, tmp_path)
    assert sbatch_scripts(res.output_dir) == []
    assert "[heads-per-tp] 64 attention heads cannot be split over tp=3" in res.output


def test_seed_002_refit_layouts_get_the_gpus_they_need(tmp_path: Path) -> None:
    import json

    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", CONF / "test_scenario" / "kimi_k2_refit.toml", tmp_path)
    worlds = {}
    for script in sbatch_scripts(res.output_dir):
        config = json.loads((script.parent / "mbridge_config.json").read_text())
        text = script.read_text()
        nodes = int(text.split("#SBATCH --nodes=")[1].split()[0])
        worlds[(config["mode"], config["src"]["tp"], config["src"]["ep"], config["dst"]["tp"], config["dst"]["ep"])] = (
            nodes * 8
        )
        assert config["model"]["num_experts"] == 384 and config["model"]["hidden_size"] == 7168
    assert worlds == {
        ("non-collocated", 8, 8, 8, 4): 96,
        ("non-collocated", 16, 4, 8, 4): 96,
        ("non-collocated", 16, 4, 16, 2): 96,
        ("non-collocated", 16, 4, 32, 2): 128,
        ("non-collocated", 8, 8, 16, 4): 128,
        ("collocated", 16, 8, 8, 16): 128,
        ("collocated", 32, 4, 16, 8): 128,
    }


def test_refit_world_size_mismatch_is_rejected(tmp_path: Path) -> None:
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeRefit"\n[cmd_args]\nmodel = "kimi_k2"\n'
        'mode = "non-collocated"\ntransport = "nccl"\nsrc = { tp = 8, ep = [8, 4] }\ndst = { tp = 8, ep = 4 }\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 8\n',
    )
    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", scenario, tmp_path)
    assert res.returncode == 0, res.output
    # 64 GPUs: EP4 (32 + 32) fits exactly, EP8 (64 + 32) does not; a world larger than both would leave the rest idle
    assert len(sbatch_scripts(res.output_dir)) == 1
    assert "[refit-layout] WORLD_SIZE=64: non-collocated mode needs at least src.world + dst.world = 64 + 32" in \
        res.output


def test_mcore_engine_limits_are_checked_at_dry_run(tmp_path: Path) -> None:
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2_proxy"\ngpu = "h100"\nengine = "mcore"\ntp = [1, 2]\nep = 4\ngbs = 16\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n',
    )
    res = dry_run(CONF / "system" / "slurm_h100_ib.toml", scenario, tmp_path)
    assert len(sbatch_scripts(res.output_dir)) == 1
    assert "[mcore-engine] tp = 2: MoE with tensor parallelism needs sequence parallelism" in res.output
    assert "Fix: use engine = 'bridge'" in res.output


def _refit_sweep(tmp_path: Path, swept: str) -> tuple:
    """Dry-run a Kimi-K2 refit (TP8·EP8 -> TP8·EP16, 16 B300 nodes) sweeping ``swept`` (TOML lines); returns the
    dry-run and the payload config of every job it wrote."""
    import json

    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeRefit"\n[cmd_args]\nmodel = "kimi_k2"\n'
        f'{swept}src = {{ tp = 8, ep = 8 }}\ndst = {{ tp = 8, ep = 16 }}\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 16\n',
    )
    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", scenario, tmp_path)
    assert res.returncode == 0, res.output
    return res, [json.loads((s.parent / "mbridge_config.json").read_text()) for s in sbatch_scripts(res.output_dir)]


def test_refit_coalesce_sweeps_and_refuses_nvshmem_and_nixl(tmp_path: Path) -> None:
    res, configs = _refit_sweep(tmp_path, 'transport = ["nccl", "nvshmem", "nixl"]\ncoalesce_mib = [0, 1024]\n')
    assert sorted((c["transport"], c["coalesce_mib"]) for c in configs) == [
        ("nccl", 0), ("nccl", 1024), ("nixl", 0), ("nvshmem", 0)]
    assert "[refit-coalesce-transport]" in res.output and "set coalesce_mib = 0" in res.output


def test_refit_executor_sweeps_and_refuses_replay_without_coalescing(tmp_path: Path) -> None:
    res, configs = _refit_sweep(tmp_path, 'executor = ["megatron", "replay"]\ncoalesce_mib = [0, 1024]\n')
    assert sorted((c["executor"], c["coalesce_mib"]) for c in configs) == [
        ("megatron", 0), ("megatron", 1024), ("replay", 1024)]
    assert "[refit-executor-coalesce]" in res.output and "set coalesce_mib > 0" in res.output


def test_refit_schedule_sweeps_to_the_payload_and_refuses_pairwise_without_coalescing(tmp_path: Path) -> None:
    res, configs = _refit_sweep(tmp_path, 'coalesce_schedule = ["rounds", "pairwise"]\ncoalesce_mib = [0, 1024]\n')
    assert sorted((c["coalesce_schedule"], c["coalesce_mib"]) for c in configs) == [
        ("pairwise", 1024), ("rounds", 0), ("rounds", 1024)]
    assert "[refit-schedule-coalesce]" in res.output and "set coalesce_mib > 0" in res.output


def test_refit_edge_sweeps_to_the_payload_and_refuses_edges_not_below_the_message_size(tmp_path: Path) -> None:
    res, configs = _refit_sweep(tmp_path, 'coalesce_edge_mib = [0, 64, 1024]\ncoalesce_mib = [0, 1024]\n')
    assert sorted((c["coalesce_edge_mib"], c["coalesce_mib"]) for c in configs) == [(0, 0), (0, 1024), (64, 1024)]
    assert "[refit-edge-coalesce]" in res.output and "set coalesce_edge_mib below coalesce_mib" in res.output


def test_shared_expert_overlap_can_be_held_off_in_both_ab_arms(tmp_path: Path) -> None:
    import json

    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2_proxy"\ngpu = "h100"\nengine = "mcore"\nep = 8\ngbs = 16\n'
        'dispatcher = ["alltoall", "deepep"]\nmoe_shared_expert_overlap = [false, true]\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n',
    )
    res = dry_run(CONF / "system" / "slurm_h100_ib.toml", scenario, tmp_path)
    configs = [json.loads((s.parent / "mbridge_config.json").read_text()) for s in sbatch_scripts(res.output_dir)]
    assert sorted((c["dispatcher"], c["moe_shared_expert_overlap"]) for c in configs) == [
        ("alltoall", False), ("alltoall", True), ("deepep", False)]
    assert "[shared-expert-overlap]" in res.output  # deepep with the overlap on is refused, not run


def test_dry_run_warns_when_a_bridge_run_will_need_the_hub(tmp_path: Path) -> None:
    """kimi_k2_sft converts and tokenizes moonshotai/Kimi-K2-Base: the compute nodes need the hub, and the warning
    says how to pre-stage it; pretraining (architecture from the catalog) needs nothing and says nothing."""
    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", CONF / "test_scenario" / "kimi_k2_sft.toml", tmp_path)
    assert res.returncode == 0, res.output
    assert "hf_model_id = 'moonshotai/Kimi-K2-Base' from the Hugging Face hub" in res.output
    assert "huggingface-cli download moonshotai/Kimi-K2-Base" in res.output
    (tmp_path / "ab").mkdir()
    ab = dry_run(CONF / "system" / "slurm_b300_efa.toml", CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml",
                 tmp_path / "ab")
    assert ab.returncode == 0 and "Hugging Face hub" not in ab.output


def test_bridge_version_is_a_field_the_allowlist_follows(tmp_path: Path) -> None:
    """A B300 DeepEP point swept over the container's Megatron-Bridge release: 0.3 would silently run all-to-all
    (whole-name allowlist), 0.4 runs DeepEP; only the 0.4 point gets a job."""
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2_proxy"\ngpu = "b300"\nengine = "bridge"\ndispatcher = "deepep"\nep = 8\ngbs = 16\n'
        'bridge_version = ["0.3", "0.4"]\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n',
    )
    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", scenario, tmp_path)
    assert len(sbatch_scripts(res.output_dir)) == 1, res.output
    assert "NVIDIA B300 SXM6 AC is not on Megatron-Bridge 0.3's DeepEP allowlist" in res.output


def test_local_model_folders_are_mounted_into_the_container(tmp_path: Path) -> None:
    """hf_model_id as a folder on the cluster (pre-staged, no hub) and hf_config_dir reach the container."""
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2_proxy"\ngpu = "b300"\nengine = "bridge"\ntask = "sft"\ndata = "/fsx/sft"\n'
        'checkpoint_dir = "/fsx/ckpt"\nhf_model_id = "/fsx/models/k2"\nhf_config_dir = "/fsx/models/k2"\n'
        'container_image = "nvcr.io/nvidia/nemo:26.04.01"\nep = 8\ngbs = 16\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n',
    )
    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", scenario, tmp_path)
    (script,) = sbatch_scripts(res.output_dir)
    text = script.read_text()
    assert "/fsx/models/k2:/fsx/models/k2" in text and text.count("/fsx/models/k2:/fsx/models/k2") == text.count(
        "--container-mounts")
    assert "Hugging Face hub" not in res.output  # a local folder needs no hub


def test_ncclep_arm_carries_its_capacity_factor_to_megatron_only(tmp_path: Path) -> None:
    """conf/test/dsv3_proxy_ncclep_ab.toml: both arms record moe_expert_rank_capacity_factor; only the ncclep arm's
    Megatron-Bridge overrides set it (payload/train/config.py rank_capacity_factor)."""
    import json

    from cloudai_mbridge.payload.train import config as tc

    res = dry_run(CONF / "system" / "slurm_h100_ib.toml", CONF / "test_scenario" / "dsv3_proxy_ncclep_ab.toml",
                  tmp_path)
    assert res.returncode == 0, res.output
    configs = [json.loads((s.parent / "mbridge_config.json").read_text()) for s in sbatch_scripts(res.output_dir)]
    assert sorted(c["dispatcher"] for c in configs) == ["alltoall", "alltoall", "ncclep", "ncclep"]
    for c in configs:
        assert c["moe_expert_rank_capacity_factor"] == 1.5 and c["gpu"] == "h100"
        overrides = tc.bridge_overrides(tc.check_config(c))
        assert overrides.get("model.moe_expert_rank_capacity_factor") == (1.5 if c["dispatcher"] == "ncclep" else None)


def test_ncclep_on_an_older_bridge_is_refused_with_the_release_rule(tmp_path: Path) -> None:
    """A swept bridge_version: the 0.6 point is written, the 0.5 point (no ncclep backend there) is skipped."""
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "deepseek_v3_proxy"\nep = 8\ngbs = 32\ndispatcher = "ncclep"\n'
        'moe_expert_rank_capacity_factor = 1.5\nbridge_version = ["0.5", "0.6"]\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n',
    )
    res = dry_run(CONF / "system" / "slurm_h100_ib.toml", scenario, tmp_path)
    assert res.returncode == 0, res.output
    assert len(sbatch_scripts(res.output_dir)) == 1
    rejected = [line for line in res.output.splitlines() if "rejected:" in line]
    assert len(rejected) == 1 and "[dispatcher-bridge-release]" in rejected[0]
    assert "Megatron-Bridge 0.5 has no 'ncclep'" in rejected[0]


def test_dry_run_does_not_wait_between_points(tmp_path: Path) -> None:
    """CloudAI's runner sleeps its monitor_interval (1 s in a dry-run) after every point for jobs a dry-run does not
    have (8 points took 9.4 s, 1.15 s of it CPU): our dry-run sets it to 0 on the runner (run keeps CloudAI's)."""
    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml",
                  tmp_path)
    assert res.returncode == 0, res.output
    sleeps = [line.split(" - ")[-1] for line in (tmp_path / "debug.log").read_text().splitlines()
              if "sleeping for" in line]
    assert len(sleeps) == len(sbatch_scripts(res.output_dir)) == 8
    assert set(sleeps) == {"sleeping for 0 seconds"}, sleeps


@pytest.mark.parametrize(("dispatcher", "mbs", "warned"), [('["alltoall", "deepep"]', "1", 0),
                                                           ('"alltoall"', "[1, 4]", 2), ('"alltoall"', "1", 1)])
def test_a_field_one_arm_needs_warns_only_where_no_point_uses_it(dispatcher: str, mbs: str, warned: int,
                                                                 tmp_path: Path) -> None:
    """deepep_impl = "uccl" set for the deepep arm of an A/B is not "unused" on the all-to-all points (the test sweeps
    the dispatcher it depends on and its deepep points use it); where no point is deepep every point still says so."""
    test = (CONF / "test" / "kimi_k2_dispatcher_ab.toml").read_text()
    test = test.replace('dispatcher = ["alltoall", "deepep"]', f"dispatcher = {dispatcher}").replace(
        "mbs = [1, 4]", f"mbs = {mbs}").replace("moe_a2a_overlap = [false, true]", "moe_a2a_overlap = false")
    _, scenario = write_case(tmp_path / "conf", test, (CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml")
                             .read_text())
    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", scenario, tmp_path)
    assert res.returncode == 0, res.output
    assert res.output.count("deepep_impl = 'uccl' is not used with dispatcher") == warned, res.output


def test_unused_field_kept_where_the_swept_dependency_never_uses_it() -> None:
    from cloudai_mbridge.workloads.training.test_definition import MBridgeTrainingCmdArgs, unused_fields

    a = MBridgeTrainingCmdArgs(model="kimi_k2_proxy", gpu="h100", dispatcher="alltoall", deepep_impl="uccl")
    said = "deepep_impl = 'uccl' is not used with dispatcher = 'alltoall'"
    assert any(said in m for m in unused_fields(a, {"dispatcher": ["alltoall", "ncclep"]}))
    assert not any(said in m for m in unused_fields(a, {"dispatcher": ["alltoall", "deepep"]}))
    assert any(said in m for m in unused_fields(a, {"mbs": [1, 4]}))


def test_a_refusal_names_the_test_file_and_the_nearest_valid_values(tmp_path: Path) -> None:
    test = (CONF / "test" / "kimi_k2_dispatcher_ab.toml").read_text().replace("ep = 32", "ep = 7")
    tests, scenario = write_case(tmp_path / "conf", test, (CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml")
                                 .read_text())
    res = dry_run(CONF / "system" / "slurm_b300_efa.toml", scenario, tmp_path)
    assert res.returncode == 1, res.output
    assert f"test 'kimi_k2_dispatcher_ab' (fields set in {tests / 'case.toml'}): every point" in res.output
    assert "the nearest ep that also divides the 384 experts: 4 or 8" in res.output  # 256 GPUs, pp 8, etp 1
    assert "use an ep that divides the number of experts (nearest: 6 or 8)" in res.output


def test_nearest_valid_values() -> None:
    from cloudai_mbridge.rules.training import nearest

    assert nearest(7, [1, 2, 4, 8, 16]) == "4 or 8"
    assert nearest(40, [1, 2, 4, 8, 16]) == "16"
    assert nearest(0, [1, 2]) == "1"
    assert nearest(3, []) == "none"
