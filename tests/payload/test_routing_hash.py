"""payload/train/routing.py: the per-step fingerprint of the routers' expert choices that the dispatcher A/B compares
across arms. Real torch modules (CPU); the router class copies Megatron-Core's contract: a module whose class name
ends in "Router" and whose forward returns (probs, routing_map) with a bool [tokens, experts] map."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from cloudai_mbridge.payload.train.routing import RoutingHash, is_router, routing_line  # noqa: E402


class TopKRouter(nn.Module):
    def __init__(self, topk: int = 2) -> None:
        super().__init__()
        self.topk = topk

    def forward(self, logits):
        idx = logits.topk(self.topk, dim=-1).indices
        routing_map = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, idx, True)
        return logits.softmax(-1), routing_map


class MoELayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.router = TopKRouter()
        self.experts = nn.Linear(4, 4)

    def forward(self, x):
        return self.router(x)


def step(model, xs):
    for layer, x in zip(model, xs, strict=True):
        layer(x)


def test_same_routing_same_hash_and_any_changed_choice_changes_it():
    torch.manual_seed(0)
    xs = [torch.randn(64, 8), torch.randn(64, 8)]
    a, b = nn.Sequential(MoELayer(), MoELayer()), nn.Sequential(MoELayer(), MoELayer())
    ha, hb = RoutingHash(), RoutingHash()
    assert ha.attach([a]) == 2 and hb.attach([b]) == 2
    step(a, xs)
    step(b, xs)
    calls, digest = ha.take()
    assert (calls, digest) == hb.take() and calls == 2 and len(digest) == 16
    # one token sent to another expert in the second layer: another hash
    moved = xs[1].clone()
    moved[7] = torch.arange(8.0)  # token 7 now picks experts 7 and 6
    step(a, xs)
    step(b, [xs[0], moved])
    assert ha.take()[1] != hb.take()[1]
    # the order of the layers is part of the fingerprint
    step(a, xs)
    step(b, xs[::-1])
    assert ha.take()[1] != hb.take()[1]


def test_a_step_without_routers_says_none_and_take_starts_over():
    h = RoutingHash()
    model = nn.Sequential(MoELayer())
    h.attach([model])
    assert h.take() == (0, None)
    model[0](torch.randn(4, 8))
    assert h.take()[0] == 1
    assert h.take() == (0, None)
    h.detach()
    model[0](torch.randn(4, 8))
    assert h.take() == (0, None)


def test_only_router_modules_are_hooked():
    assert is_router(TopKRouter())
    assert not is_router(nn.Linear(2, 2))
    assert not is_router(MoELayer())


def test_line_format():
    line = routing_line(3, 12, 8, "00ff00ff00ff00ff")
    assert line == "MBRIDGE_ROUTING rank=3 iteration=12 calls=8 hash=00ff00ff00ff00ff"
    assert routing_line(0, 1, 0, None).endswith("hash=none")
