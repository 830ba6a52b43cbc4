"""Time inside the MoE token dispatcher's dispatch and combine, per training step: where a dispatcher A/B's change
in step time went (reports/ab.py splits it into dispatch, combine and the rest).

Every Megatron-Core MoE layer holds its dispatcher as ``token_dispatcher`` (megatron/core/transformer/moe/
moe_layer.py), and every dispatcher class (all-to-all, all-gather, flex with its deepep / hybridep / ncclep backends;
token_dispatcher.py in 0.16.1 and 0.19.2) splits the work into the same six methods, which the MoE layer calls in
order: ``dispatch_preprocess`` (permute), ``token_dispatch`` (the communication), ``dispatch_postprocess``; then the
experts; then ``combine_preprocess``, ``token_combine`` (the communication), ``combine_postprocess``. The timer wraps
those methods on each dispatcher instance (nothing else changes; the methods' results are passed through untouched):

- forward: the span of each of the three dispatch methods adds to ``dispatch_ms``, each combine method's to
  ``combine_ms`` (an activation-recomputed layer runs them again: that time is spent too and is counted);
- backward of the communication: from the moment the gradient reaches ``token_dispatch``'s output to the moment it
  leaves its input (tensor hooks), likewise ``token_combine``: the reverse all-to-all. Autograd may run other ready
  work inside that window; the backward of the permutations is not separated (it is in "the rest").

Clock: CUDA events on the current stream when CUDA is available (no host sync in the step: :meth:`take` reads them
after the step, when the payload has synced for its log line), else ``time.perf_counter``. The per-step sums are
appended to the routing line as optional fields: ``MBRIDGE_ROUTING rank=<r> iteration=<i> calls=<n> hash=<h>
dispatch_ms=<x> combine_ms=<y> dispatcher_calls=<k>`` (payload/train/routing.py; logs without them still parse).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DISPATCH = ("dispatch_preprocess", "token_dispatch", "dispatch_postprocess")
COMBINE = ("combine_preprocess", "token_combine", "combine_postprocess")
COMMUNICATION = {"token_dispatch": "dispatch", "token_combine": "combine"}  # also timed in the backward
_WRAPPED = "_mbridge_dispatch_timer"


def _first_tensor(value: Any) -> Any:
    import torch

    for item in value if isinstance(value, (tuple, list)) else (value,):
        if isinstance(item, torch.Tensor):
            return item
    return None


def moe_dispatchers(model_chunks: list[Any]) -> list[Any]:
    """The token dispatcher of every MoE layer under the model chunks, each instance once, in module order."""
    found: dict[int, Any] = {}
    for chunk in model_chunks:
        for module in chunk.modules():
            dispatcher = getattr(module, "token_dispatcher", None)
            if dispatcher is not None:
                found.setdefault(id(dispatcher), dispatcher)
    return list(found.values())


class DispatcherTimer:
    def __init__(self, use_cuda: bool | None = None, clock: Callable[[], float] | None = None) -> None:
        import torch

        self.use_cuda = torch.cuda.is_available() if use_cuda is None else use_cuda
        self._clock = clock or time.perf_counter
        self._spans: dict[str, list[tuple[Any, Any]]] = {"dispatch": [], "combine": []}
        self.calls = 0
        self._wrapped: list[tuple[Any, str, Any]] = []

    def _mark(self) -> Any:
        if self.use_cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return self._clock()

    def _timed(self, method: Any, phase: str, name: str) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            import torch

            start = self._mark()
            out = method(*args, **kwargs)
            self._spans[phase].append((start, self._mark()))
            if name in COMMUNICATION:
                self.calls += 1
                x, y = _first_tensor(args), _first_tensor(out)
                if torch.is_grad_enabled() and x is not None and y is not None and x.requires_grad and \
                        y.requires_grad:
                    opened: list[Any] = []

                    def on_output_grad(grad: Any) -> None:
                        opened.append(self._mark())

                    def on_input_grad(grad: Any) -> None:
                        if opened:
                            self._spans[phase].append((opened.pop(), self._mark()))

                    y.register_hook(on_output_grad)
                    x.register_hook(on_input_grad)
            return out

        setattr(timed, _WRAPPED, method)
        return timed

    def attach(self, model_chunks: list[Any]) -> int:
        """Wrap the dispatcher of every MoE layer under the model chunks (each instance once); returns how many."""
        dispatchers = moe_dispatchers(model_chunks)
        for dispatcher in dispatchers:
            for phase, names in (("dispatch", DISPATCH), ("combine", COMBINE)):
                for name in names:
                    method = getattr(dispatcher, name, None)
                    if method is None or hasattr(method, _WRAPPED):
                        continue
                    setattr(dispatcher, name, self._timed(method, phase, name))
                    self._wrapped.append((dispatcher, name, method))
        return len(dispatchers)

    def _ms(self, start: Any, end: Any) -> float:
        if self.use_cuda:
            end.synchronize()
            return float(start.elapsed_time(end))
        return (end - start) * 1000.0

    def take(self) -> tuple[float | None, float | None, int]:
        """(dispatch ms, combine ms, dispatcher communication calls) of the step that just ended, then start over;
        (None, None, 0) when no dispatcher ran."""
        spans, calls = self._spans, self.calls
        self._spans, self.calls = {"dispatch": [], "combine": []}, 0
        if not calls:
            return None, None, 0
        return (sum(self._ms(s, e) for s, e in spans["dispatch"]),
                sum(self._ms(s, e) for s, e in spans["combine"]), calls)

    def detach(self) -> None:
        for dispatcher, name, method in self._wrapped:
            setattr(dispatcher, name, method)
        self._wrapped.clear()


def timing_fields(dispatch_ms: float | None, combine_ms: float | None, calls: int) -> str:
    """The optional fields the routing line carries (empty when no dispatcher ran)."""
    if dispatch_ms is None or combine_ms is None:
        return ""
    return f" dispatch_ms={dispatch_ms:.3f} combine_ms={combine_ms:.3f} dispatcher_calls={calls}"
