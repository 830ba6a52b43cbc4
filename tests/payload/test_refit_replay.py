"""payload/refit/replay.py's plan lookup without a refit: the Megatron-Core >= 0.17 path (``_unwrap_model_cores`` +
``_build_or_get_plan``, module-level ``_plan_cache``; 0.16.1 is installed here, so a stand-in refit module plays
0.19.2's) and the reasons it falls back. The 0.16 path and the whole replay run in test_refit_payload.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from cloudai_mbridge.payload.refit import replay

# importing megatron.core.resharding in-process reaches torch.jit deprecations (the payload runs it in subprocesses)
pytestmark = [pytest.mark.payload, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


class _Core(torch.nn.Module):
    def __init__(self, rows: int, cols: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(rows, cols))


def _op(name, peer, task, sl):
    return SimpleNamespace(param_name=name, peer_rank=peer, task_id=task, my_slice=sl)


@pytest.fixture
def fake_019(monkeypatch):
    """A refit module shaped like 0.19.2's: records the _build_or_get_plan arguments."""
    from megatron.core.resharding import execution, refit

    src, dst = _Core(4, 6), _Core(4, 12)
    plan = SimpleNamespace(
        send_ops=[_op("w", 1, 7, (slice(None), slice(0, 3))), _op("missing", 1, 8, (slice(None),))],
        recv_ops=[_op("w", 1, 9, (slice(None), slice(6, 12)))], transform=None)
    calls, cache = [], {"key": plan}

    def build_or_get(*args):
        calls.append(args)
        return cache["key"]

    monkeypatch.setattr(refit, "_unwrap_model_cores", lambda s, t: (s, t, 8), raising=False)
    monkeypatch.setattr(refit, "_build_or_get_plan", build_or_get, raising=False)
    monkeypatch.setattr(refit, "_plan_cache", cache, raising=False)
    monkeypatch.setattr(execution, "get_refit_tensor_dict", lambda m: dict(m.named_parameters()), raising=False)
    return SimpleNamespace(src=src, dst=dst, plan=plan, calls=calls, cache=cache)


def test_the_019_lookup_uses_swap_model_weights_defaults_and_hands_over_strided_views(fake_019):
    ex = replay.ReplayExecutor(fake_019.src, fake_019.dst)
    ex.build()
    # group=None, src_rank_offset=0, dst_rank_offset=0, pool_index=0: what swap_model_weights passes by default
    assert fake_019.calls == [(fake_019.src, fake_019.dst, 8, None, 0, 0, 0)]
    (send,), (recv,) = ex.prepared.sends, ex.prepared.recvs  # the op for a name this rank lacks is skipped
    assert (send.peer, send.task_id, recv.peer, recv.task_id) == (1, 7, 1, 9)
    assert not send.tensor.is_contiguous() and not recv.tensor.is_contiguous()  # views, no copies
    assert send.tensor.data_ptr() == fake_019.src.w.data_ptr()
    recv.tensor.fill_(3.0)  # writes land in the parameter itself
    assert fake_019.dst.w[:, 6:].eq(3.0).all() and fake_019.dst.w[:, :6].eq(0.0).all()
    assert ex.check_storage()
    fake_019.dst.w.data = torch.zeros(4, 12)  # storage replaced: the views are stale, refit() rebuilds
    assert not ex.check_storage()


def test_a_transform_or_a_plan_built_now_falls_back(fake_019):
    fake_019.plan.transform = object()
    with pytest.raises(replay.FallbackError, match="transform"):
        replay.ReplayExecutor(fake_019.src, fake_019.dst).build()
    fake_019.plan.transform = None

    def builds(*args):  # a key that was not cached: the call built (and cached) a plan
        fake_019.cache["other"] = fake_019.plan
        return fake_019.plan

    from megatron.core.resharding import refit

    refit._build_or_get_plan = builds
    with pytest.raises(replay.FallbackError, match="plan-not-cached"):
        replay.ReplayExecutor(fake_019.src, fake_019.dst).build()
