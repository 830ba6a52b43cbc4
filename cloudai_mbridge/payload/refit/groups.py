"""Process groups for one side of a refit, built from two HyperCommGrids over that side's ranks.

Dense grid [tp, cp, dp, pp] and expert grid [etp, ep, edp, pp] (EP carved out of tp*dp, as Megatron does), both
starting at the side's first rank. `torch.distributed.new_group` is collective over the whole world, so every rank
builds the groups of both sides, also those it is not in; ranks outside a side get None for that side.
"""

from __future__ import annotations

import torch.distributed as dist

from .config import SideLayout


def _member_group(rank_lists: list[list[int]]):
    """One new_group per list (every rank calls all of them, in the same order); return the one holding us."""
    me = dist.get_rank()
    mine = None
    for ranks in rank_lists:
        group = dist.new_group(ranks=ranks)
        if me in ranks:
            mine = group
    return mine


def build_pg_collection(side: SideLayout):
    """Create this side's groups on every rank; return a ProcessGroupCollection on member ranks, else None."""
    from megatron.core import parallel_state
    from megatron.core.hyper_comm_grid import HyperCommGrid
    from megatron.core.process_groups_config import ProcessGroupCollection

    dense = HyperCommGrid([side.tp, 1, side.dp, side.pp], ["tp", "cp", "dp", "pp"], rank_offset=side.rank_offset)
    expert = HyperCommGrid(
        [side.etp, side.ep, side.edp, side.pp], ["etp", "ep", "edp", "pp"], rank_offset=side.rank_offset
    )
    groups = {
        "tp": dense.create_pg("tp"),
        "cp": dense.create_pg("cp"),
        "dp": dense.create_pg("dp"),
        "pp": dense.create_pg("pp"),
        "tp_cp": dense.create_pg(["tp", "cp"]),
        "dp_cp": dense.create_pg(["cp", "dp"]),
        "mp": dense.create_pg(["tp", "pp"]),
        "tp_dp_cp": dense.create_pg(["tp", "cp", "dp"]),
        "expt_tp": expert.create_pg("etp"),
        "ep": expert.create_pg("ep"),
        "expt_dp": expert.create_pg("edp"),
        "tp_ep": expert.create_pg(["etp", "ep"]),
        "tp_ep_pp": expert.create_pg(["etp", "ep", "pp"]),
    }
    pp_lists = dense.get_rank_enum("pp")
    groups["embd"] = _member_group([parallel_state.default_embedding_ranks(r) for r in pp_lists])
    groups["pos_embd"] = _member_group([parallel_state.default_position_embedding_ranks(r) for r in pp_lists])
    if dist.get_rank() not in side.ranks:
        return None
    return ProcessGroupCollection(**groups)
