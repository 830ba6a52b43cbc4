"""payload/train/dispatch_timing.py on Megatron-Core's real token dispatcher (0.16.1, CPU): the all-gather dispatcher
(MoEAllGatherTokenDispatcher, the one that runs without CUDA) over a one-rank gloo group, called in the order the MoE
layer calls it, forward and backward. A controlled clock proves the bookkeeping: each phase's time lands in its own
field, the backward of the communication included."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")
dist = torch.distributed

from cloudai_mbridge.payload.train.dispatch_timing import DispatcherTimer, timing_fields  # noqa: E402
from cloudai_mbridge.payload.train.routing import routing_line  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Advance(torch.autograd.Function):
    """Identity whose backward moves the clock: the reverse communication's cost, known to the test."""

    @staticmethod
    def forward(ctx, x, clock, seconds):
        ctx.clock, ctx.seconds = clock, seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.clock.now += ctx.seconds
        return grad, None, None


@pytest.fixture
def moe_layer(tmp_path):
    """A module holding a real Megatron-Core dispatcher as ``token_dispatcher``, as MoELayer does."""
    import warnings

    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.token_dispatcher import MoEAllGatherTokenDispatcher
    from megatron.core.transformer.transformer_config import TransformerConfig

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        group = dist.new_group([0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, num_moe_experts=4,
                                       moe_router_topk=2, moe_token_dispatcher_type="allgather",
                                       use_cpu_initialization=True)
        layer = torch.nn.Module()
        layer.token_dispatcher = MoEAllGatherTokenDispatcher(
            num_local_experts=4, local_expert_indices=[0, 1, 2, 3], config=config,
            pg_collection=ProcessGroupCollection(ep=group, tp=group, expt_tp=group, expt_dp=group, tp_ep=group))
        yield layer
    finally:
        dist.destroy_process_group()


def moe_step(d, x):
    """MoELayer.forward's order of dispatcher calls (megatron/core/transformer/moe/moe_layer.py), experts = x2."""
    tokens = x.view(-1, x.shape[-1])
    routing_map = torch.zeros(tokens.shape[0], 4, dtype=torch.bool)
    routing_map[:, :2] = True
    probs = torch.full((tokens.shape[0], 4), 0.5) * routing_map
    h, p = d.dispatch_preprocess(tokens, routing_map, probs)
    h, p = d.token_dispatch(h, p)
    h, _, p = d.dispatch_postprocess(h, p)
    out = d.combine_preprocess(h * 2.0)
    out = d.token_combine(out)
    return d.combine_postprocess(out)


def test_the_timer_changes_no_result(moe_layer):
    x = torch.randn(6, 1, 8, requires_grad=True)
    plain = moe_step(moe_layer.token_dispatcher, x)
    plain.sum().backward()
    grad = x.grad.clone()
    x.grad = None
    timer = DispatcherTimer(use_cuda=False)
    assert timer.attach([moe_layer]) == 1
    assert timer.attach([moe_layer]) == 1  # a second attach wraps nothing twice
    timed = moe_step(moe_layer.token_dispatcher, x)
    timed.sum().backward()
    assert torch.equal(plain, timed) and torch.equal(grad, x.grad)
    dispatch_ms, combine_ms, calls = timer.take()
    assert calls == 2 and dispatch_ms > 0 and combine_ms > 0  # perf_counter: real time was spent
    assert timer.take() == (None, None, 0)  # take starts over
    timer.detach()
    moe_step(moe_layer.token_dispatcher, x)
    assert timer.take() == (None, None, 0)  # detached: nothing recorded


def test_each_phase_lands_in_its_field_forward_and_backward(moe_layer):
    clock = Clock()
    d = moe_layer.token_dispatcher
    timer = DispatcherTimer(use_cuda=False, clock=clock)
    costs = {"dispatch_preprocess": 0.001, "token_dispatch": 0.010, "dispatch_postprocess": 0.002,
             "combine_preprocess": 0.0005, "token_combine": 0.004, "combine_postprocess": 0.0015}
    backward = {"token_dispatch": 0.020, "token_combine": 0.008}
    for name, seconds in costs.items():  # each real method, made to cost a known time (forward and backward)
        real = getattr(d, name)

        def costly(*args, real=real, seconds=seconds, name=name):
            clock.now += seconds
            out = real(*args)
            if name in backward:
                if isinstance(out, tuple):
                    return (Advance.apply(out[0], clock, backward[name]), *out[1:])
                return Advance.apply(out, clock, backward[name])
            return out

        setattr(d, name, costly)
    timer.attach([moe_layer])
    x = torch.randn(6, 1, 8, requires_grad=True)
    moe_step(d, x).sum().backward()
    dispatch_ms, combine_ms, calls = timer.take()
    assert calls == 2
    assert dispatch_ms == pytest.approx(1 + 10 + 2 + 20)
    assert combine_ms == pytest.approx(0.5 + 4 + 1.5 + 8)
    with torch.no_grad():  # inference: no backward window is opened
        moe_step(d, x)
    assert timer.take()[:2] == (pytest.approx(13), pytest.approx(6))


def test_the_fields_ride_on_the_routing_line():
    line = routing_line(3, 7, 4, "00ff00ff00ff00ff", timing_fields(12.3456, 7.5, 8))
    assert line == ("MBRIDGE_ROUTING rank=3 iteration=7 calls=4 hash=00ff00ff00ff00ff dispatch_ms=12.346 "
                    "combine_ms=7.500 dispatcher_calls=8")
    assert routing_line(0, 1, 0, None, timing_fields(None, None, 0)) == (
        "MBRIDGE_ROUTING rank=0 iteration=1 calls=0 hash=none")
