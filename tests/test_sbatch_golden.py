"""Generated sbatch scripts compared with golden files (placeholders for the output folder and timestamps).

Regenerate after an intended change with: MBRIDGE_UPDATE_GOLDEN=1 python -m pytest tests/test_sbatch_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import CONF, normalize, slurm_strategy

GOLDEN = Path(__file__).parent / "golden"

CASES = {
    "kimi_k2_sft_b300_efa": ("slurm_b300_efa", "kimi_k2_sft", 32, {}),
    "kimi_k2_ab_deepep_mbs4_overlap": (
        "slurm_b300_efa",
        "kimi_k2_dispatcher_ab",
        32,
        {"dispatcher": "deepep", "mbs": 4, "moe_a2a_overlap": True},
    ),
    "dsv3_ab_alltoall_h100_ib_no_container": (
        "slurm_h100_ib",
        "dsv3_dispatcher_ab",
        32,
        {
            "gpu": "h100",
            "dispatcher": "alltoall",
            "mbs": 1,
            "moe_a2a_overlap": False,
            "container_image": None,
            "deepep_impl": "nvidia",
        },
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sbatch_matches_golden(case: str, tmp_path: Path) -> None:
    system, test, nodes, overrides = CASES[case]
    out = tmp_path / "run"
    strategy = slurm_strategy(CONF / "system" / f"{system}.toml", CONF / "test" / f"{test}.toml", nodes, out, overrides)
    command = strategy.gen_exec_command()
    assert command == f"sbatch {out / 'cloudai_sbatch_script.sh'}"
    text = normalize((out / "cloudai_sbatch_script.sh").read_text(), out)
    golden = GOLDEN / f"{case}.sh"
    if os.environ.get("MBRIDGE_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()


def test_sft_conversion_step_is_skipped_when_the_checkpoint_exists(tmp_path: Path) -> None:
    out = tmp_path / "run"
    strategy = slurm_strategy(CONF / "system" / "slurm_b300_efa.toml", CONF / "test" / "kimi_k2_sft.toml", 32, out)
    strategy.gen_exec_command()
    text = (out / "cloudai_sbatch_script.sh").read_text()
    convert, train = text.index("mbridge_payload.convert"), text.index("mbridge_payload.train")
    assert convert < train
    assert "if [ -e /fsx/checkpoints/kimi-k2-base-mcore/latest_checkpointed_iteration.txt ]" in text
    assert "--nodes=1 --ntasks-per-node=1" in text[text.rindex("srun", 0, convert) : convert]


def test_generation_never_overwrites_an_earlier_run(tmp_path: Path) -> None:
    from cloudai_mbridge.launch.payload import ResultsExistError

    out = tmp_path / "run"
    args = (CONF / "system" / "slurm_b300_efa.toml", CONF / "test" / "kimi_k2_sft.toml", 32, out)
    slurm_strategy(*args).gen_exec_command()
    (out / "logs").mkdir()
    (out / "logs" / "rank-0.log").write_text("precious result\n")
    with pytest.raises(ResultsExistError, match="refusing to overwrite"):
        slurm_strategy(*args).gen_exec_command()
    assert (out / "logs" / "rank-0.log").read_text() == "precious result\n"


def test_the_submit_command_survives_a_shell_for_any_output_path(tmp_path: Path) -> None:
    """CloudAI runs the returned command through a shell: a folder with a space or a quote must stay one argument."""
    import shlex

    out = tmp_path / "my run's $(id) out"
    strategy = slurm_strategy(CONF / "system" / "slurm_b300_efa.toml", CONF / "test" / "kimi_k2_sft.toml", 32, out)
    command = strategy.gen_exec_command()
    assert shlex.split(command) == ["sbatch", str(out / "cloudai_sbatch_script.sh")]
