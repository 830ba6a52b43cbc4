from __future__ import annotations

from pathlib import Path

import pytest

from cloudai_mbridge.metrics import dp_rank0_ranks, load_layout

from .conftest import make_run, training_config


@pytest.mark.parametrize(
    ("config", "world", "expected"),
    [
        # tp-cp-(ep)-dp-pp: rank = tp + 2*(dp + 2*pp) with tp=2, dp=2, pp=2
        ({"tp": 2, "pp": 2}, 8, (0, 1, 4, 5)),
        # Megatron-Core's own example: order tp-pp-dp, sizes 2-2-2, dp groups [0,4] [1,5] [2,6] [3,7]
        ({"tp": 2, "pp": 2, "rank_order": "tp-pp-dp"}, 8, (0, 1, 2, 3)),
        ({"tp": 1, "pp": 1}, 4, (0,)),
        # size-1 dimensions left out of the order are appended, as RankGenerator does
        ({"tp": 2, "rank_order": "tp-dp"}, 8, (0, 1)),
        ({"tp": 2, "pp": 2, "cp": 2}, 8, tuple(range(8))),
        ({"tp": 8, "pp": 8, "ep": 32}, 256, tuple(r for r in range(256) if (r // 8) % 4 == 0)),
    ],
)
def test_dp_rank0_ranks(config: dict, world: int, expected: tuple[int, ...]) -> None:
    assert dp_rank0_ranks(config, world) == expected


@pytest.mark.parametrize(
    ("config", "world"),
    [
        ({"tp": 3, "pp": 1}, 8),  # does not divide
        ({"tp": "x"}, 8),
        ({"tp": 2, "pp": 2, "rank_order": "tp-dp"}, 8),  # pp > 1 missing from the order
        ({"tp": 2, "rank_order": 7}, 8),
        ({"tp": 2}, None),
    ],
)
def test_dp_rank0_ranks_unknown(config: dict, world: int | None) -> None:
    assert dp_rank0_ranks(config, world) is None


def test_layout_finds_rank_logs_and_world_size(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", training_config(world_size=4), {0: "a\n", 3: "b\n"}, stdout="x\n")
    (run / "logs" / "rank-01.log").write_text("padded names are not ours\n")
    (run / "logs" / "notes.txt").write_text("\n")
    layout = load_layout(run)
    assert sorted(layout.rank_logs) == [0, 3]
    assert layout.world_size == 4 and layout.world_size_source == "config"
    assert layout.last_rank == 3
    assert layout.missing_ranks == (1, 2)
    assert [p.name for p in layout.job_logs] == ["stdout.txt"]
    assert layout.workload == "training"


def test_layout_world_size_fallbacks(tmp_path: Path) -> None:
    config = training_config()
    del config["world_size"]
    assert load_layout(make_run(tmp_path / "a", config)).world_size == 2
    layout = load_layout(make_run(tmp_path / "b", None, {0: "x\n", 5: "y\n"}))
    assert (layout.world_size, layout.world_size_source, layout.config_status) == (6, "rank_logs", "missing")
    empty = load_layout(tmp_path / "nothing")
    assert (empty.world_size, empty.last_rank, empty.missing_ranks) == (None, None, ())


def test_layout_invalid_config(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", None, {0: "x\n"})
    (run / "mbridge_config.json").write_text("{not json")
    assert load_layout(run).config_status == "invalid"
    (run / "mbridge_config.json").write_text("[1, 2]")
    assert load_layout(run).config_status == "invalid"
