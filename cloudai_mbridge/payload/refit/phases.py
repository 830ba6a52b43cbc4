"""Where a refit's time goes (refit config ``"profile": true``): a copy service wrapper that clocks each refit.

swap_model_weights plans (cached after the first call), builds the slices and submits every send/recv to the copy
service, then calls its ``run()`` (the transfers and same-rank copies), then writes received buffers back. Per refit:

- ``submit_ms``: host time from the start of swap_model_weights to the service's ``run()`` call;
- ``run_ms``: ``run()`` with a CUDA synchronize before the clock stops (transfers + local copies);
- ``rest_ms``: the remainder of the timed refit (megatron-core's barrier and write-back after ``run()``);
- coalescing service (coalesce_mib > 0) only: ``run()`` split into ``local_ms`` / ``pack_ms`` / ``comm_ms`` /
  ``unpack_ms``, with a CUDA synchronize between phases (profile mode only: it costs some overlap).

Rank 0 prints ``REFIT_PHASES submit_ms=.. run_ms=.. rest_ms=.. [local_ms=.. pack_ms=.. comm_ms=.. unpack_ms=..]``,
medians over the timed refits of rank 0's own clock.
"""

from __future__ import annotations

import inspect
import statistics
import time

COALESCE_PHASES = ("local", "pack", "comm", "unpack")


class PhaseRecorder:
    def __init__(self, sync=None):
        self.sync = sync
        self.records: list[dict[str, float]] = []
        self._mark = 0.0

    def begin(self, start: float) -> None:
        """Called with the timed window's start clock, just before swap_model_weights."""
        self.records.append({"submit": 0.0, "run": 0.0})
        self._mark = start

    def end(self, elapsed_s: float) -> None:
        rec = self.records[-1]
        rec["rest"] = max(0.0, elapsed_s * 1e3 - rec["submit"] - rec["run"])

    def line(self) -> str | None:
        if not self.records:
            return None
        keys = ["submit", "run", "rest"] + [p for p in COALESCE_PHASES if p in self.records[0]]
        parts = [f"{k}_ms={statistics.median(r.get(k, 0.0) for r in self.records):.3f}" for k in keys]
        return "REFIT_PHASES " + " ".join(parts)

    def medians(self) -> dict[str, float]:
        line = self.line() or ""
        return {k[:-3]: float(v) for k, _, v in (p.partition("=") for p in line.split()[1:])}


def _service_for(name: str):
    """megatron-core's cached service for a backend name (0.19: get_or_create_service(backend, group=None);
    0.16: get_or_create_service(backend))."""
    from megatron.core.resharding import refit

    factory = refit.get_or_create_service
    if "group" in inspect.signature(factory).parameters:
        return factory(name, group=None)
    return factory(name)


def profiled(method, recorder: PhaseRecorder):
    """A CopyService (megatron-core checks isinstance) forwarding everything to `method` (a CopyService, or a
    backend name resolved through megatron-core's service cache) and clocking submit and run into `recorder`."""
    from megatron.core.resharding.copy_services.base import CopyService

    inner = _service_for(method) if isinstance(method, str) else method

    class ProfiledCopyService(CopyService):
        def __init__(self):  # no CopyService.__init__: the inner service owns rank/group
            self.__dict__["_inner"] = inner

        def __getattr__(self, name):
            return getattr(self.__dict__["_inner"], name)

        @property
        def requires_process_group_barrier(self):
            return getattr(inner, "requires_process_group_barrier", True)

        def submit_send(self, *args, **kwargs):
            return inner.submit_send(*args, **kwargs)

        def submit_recv(self, *args, **kwargs):
            return inner.submit_recv(*args, **kwargs)

        def submit_send_with_id(self, *args, **kwargs):
            return inner.submit_send_with_id(*args, **kwargs)

        def submit_recv_with_id(self, *args, **kwargs):
            return inner.submit_recv_with_id(*args, **kwargs)

        def close(self, *args, **kwargs):
            close = getattr(inner, "close", None)
            return close(*args, **kwargs) if close is not None else None

        def run(self, *args, **kwargs):
            t0 = time.perf_counter()
            rec = recorder.records[-1] if recorder.records else {}
            rec["submit"] = rec.get("submit", 0.0) + (t0 - recorder._mark) * 1e3
            coalescing = hasattr(inner, "phase_ms")
            if coalescing:
                inner.phase_ms, inner.phase_sync = {p: 0.0 for p in COALESCE_PHASES}, recorder.sync
            try:
                return inner.run(*args, **kwargs)
            finally:
                if recorder.sync is not None:
                    recorder.sync()
                t1 = time.perf_counter()
                rec["run"] = rec.get("run", 0.0) + (t1 - t0) * 1e3
                if coalescing:
                    for p, ms in inner.phase_ms.items():
                        rec[p] = rec.get(p, 0.0) + ms
                    inner.phase_ms, inner.phase_sync = None, None
                recorder._mark = t1

    return ProfiledCopyService()
