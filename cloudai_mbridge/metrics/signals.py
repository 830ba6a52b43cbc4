"""Is a run's number worth anything? Validity signals and failure classification from rank logs.

Payload log-line contracts
==========================
Megatron-Core does not log which MoE token dispatcher it built, and Megatron-Bridge only warns (rank 0) when it
declines a flex backend (``flex_dispatcher_backend.apply_flex_dispatcher_backend``: "... Skipping DeepEP
configuration."). So the training payload prints two lines of its own, once, on rank 0 (printing them on every rank
is allowed; the parser reads rank 0 and the last rank and flags disagreement), after the model is built. Grammar::

    MBRIDGE_DISPATCHER requested=<alltoall|deepep|hybridep|ncclep> built=<alltoall|flex|allgather> backend=<B>
    MBRIDGE_DEEP_EP module=<path|none> provider=<uccl|nvidia|none>

with ``<B>`` one of ``deepep``, ``hybridep``, ``ncclep``, ``none``. Example (the UCCL arm of the A/B)::

    MBRIDGE_DISPATCHER requested=deepep built=flex backend=deepep
    MBRIDGE_DEEP_EP module=/opt/uccl/ep/deep_ep_wrapper/deep_ep/__init__.py provider=uccl

- ``requested``: the ``dispatcher`` field of our config. ``built``: ``moe_token_dispatcher_type`` of the model config
  the MoE layers were built from (after Bridge's ``apply_flex_dispatcher_backend``). ``backend``:
  ``moe_flex_dispatcher_backend`` when ``built=flex``, else ``none``.
- ``module``: ``deep_ep.__file__`` as imported in the training process (``none`` when the import fails);
  ``provider``: ``uccl`` for UCCL-EP's drop-in (``uccl-project/uccl`` ``ep/deep_ep_wrapper``), ``nvidia`` for
  NVIDIA DeepEP, ``none`` when there is no importable ``deep_ep``.
- Tokens are ``key=value`` separated by spaces; values never contain whitespace (percent-encode a path that does).
  Unknown keys are ignored, so the line can grow.

A run that requested a flex backend (``deepep``/``hybridep``/``ncclep``, :data:`FLEX_BACKENDS`) but built
``alltoall`` (or another backend) is a *dispatcher downgrade*: its time is not the arm it claims to be. Bridge's own
warnings count as one too: "Skipping ... configuration" (0.3-0.5, and any release for a backend it does not know,
e.g. ``ncclep`` before 0.6.2) and "Falling back to alltoall" (0.6.2's allowlists).

Other signals, with the source of each string
=============================================
- EFA: aws-ofi-nccl's ``NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)`` (older plugins:
  ``Selected Provider is efa``) with ``NCCL_DEBUG=INFO``; socket fallback shows as ``Using network Socket`` /
  ``NET/Socket``.
- UCCL-EP proxies (``uccl-project/uccl`` ``ep/src/uccl_ep.cc``, ``ep/src/rdma.cpp``): ``Registered proxies for device
  <d> (<high-throughput|low-latency> mode)`` (older: ``Registered proxy for device <d>``) once per process, and
  ``[RDMA] Selected NIC <nic> (index <i>) for ...`` per proxy thread (EFA NICs are named ``rdmap...``).
- Failures: PyTorch's ``torch.OutOfMemoryError: CUDA out of memory``, ProcessGroupNCCL's ``Watchdog caught collective
  operation timeout``, DeepEP's ``DeepEP error: timeout``, ``Segmentation fault`` / ``Signal 11 (SIGSEGV)``, Slurm's
  ``srun: error: Node failure on <node>`` and ``*** STEP ... CANCELLED AT ... DUE TO NODE FAILURE|TIME LIMIT ***``.

How the failure search stays cheap: every message above that ends a job comes with a line containing ``rror``
(``...Error:``, ``srun: error:``, ``slurmstepd: error:``, ``DistBackendError``, ``ChildFailedError``). Every file is
searched for that one needle; only a file where such a line is itself a failure line (it matches one of
:data:`FAILURE_RULES`; a warning that merely says "on error" does not) is searched for the rest (watchdog, segfault,
OOM, SIGKILL, NODE_FAIL). Job-level logs (stdout/stderr) always get the full search.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ..redact import redact
from .scan import FileScan, LogLine, Marker

# --- line patterns ---------------------------------------------------------------------------------------------------
_EFA_RE = re.compile(
    r"Selected [Pp]rovider is efa\*?(?:, fabric is (?P<fabric>[\w-]+))?(?: \(found (?P<nics>\d{1,9}) nics?\))?"
)
_SOCKET_RE = re.compile(r"Using network Socket|NET/Socket")
_UCCL_PROXY_RE = re.compile(r"Registered prox(?:y|ies) for device (?P<dev>\d+)(?: \((?P<mode>[\w-]+) mode\))?")
_UCCL_NIC_RE = re.compile(r"\[RDMA\] Selected NIC (?P<nic>\S+) \(index \d+\)")
_CONTRACT_RE = re.compile(r"MBRIDGE_(?P<kind>DISPATCHER|DEEP_EP)\b(?P<rest>.*)$")
_KV_RE = re.compile(r"(?<!\S)(?P<key>\w+)=(?P<value>\S*)")
_BRIDGE_SKIP_RE = re.compile(
    r"Skipping (?:DeepEP|HybridEP|flex dispatcher backend) configuration|Falling back to alltoall"
)

FLEX_BACKENDS = ("deepep", "hybridep", "ncclep")
CONTRACT_VALUES = {
    "requested": ("alltoall", *FLEX_BACKENDS),
    "built": ("alltoall", "flex", "allgather"),
    "backend": (*FLEX_BACKENDS, "none"),
    "provider": ("uccl", "nvidia", "unknown", "none"),
}

_EXCEPTION_RE = re.compile(r"^\s*(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception))(?::|\s*$)")
FAILURE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # The payloads' own verdicts (cloudai_mbridge/payload/train/, refit/), printed before they exit non-zero.
    ("config_error", re.compile(r"MBRIDGE_CONFIG_ERROR\b")),
    ("dispatcher_error", re.compile(r"MBRIDGE_DISPATCHER_ERROR\b")),
    ("refit_error", re.compile(r"REFIT_ERROR\b")),
    # the training payload's progress watchdog (payload/train/watchdog.py) before it exits 124
    ("hang", re.compile(r"MBRIDGE_HANG class=")),
    ("oom", re.compile(r"CUDA out of memory|OutOfMemoryError|\bout of memory\b")),
    ("deepep_timeout", re.compile(r"DeepEP error: timeout")),
    (
        "nccl_timeout",
        re.compile(
            r"Watchdog caught collective operation timeout|detected by watchdog|watchdog thread terminated"
            r"|watchdog got stuck"
        ),
    ),
    ("nccl_error", re.compile(r"NCCL error|DistBackendError|nccl(?:Internal|System|UnhandledCuda|Remote)Error")),
    ("segfault", re.compile(r"Segmentation fault|SIGSEGV|Signal 11\b")),
    ("node_failure", re.compile(r"Node failure on|NODE_FAIL|DUE TO NODE FAILURE")),
    ("time_limit", re.compile(r"DUE TO TIME LIMIT")),
    ("cancelled", re.compile(r"CANCELLED AT")),
    ("killed", re.compile(r"SIGKILL|Signal 9\b|(?:^|: )Killed\b")),
    ("child_failed", re.compile(r"ChildFailedError")),
    ("import_error", re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*(?:ImportError|ModuleNotFoundError)(?::|\s*$)")),
    ("exception", _EXCEPTION_RE),
)
# Root causes before their symptoms: a node failure or an OOM on one rank makes every other rank's NCCL watchdog
# fire; torchrun's ChildFailedError only says that some child died.
FAILURE_PRIORITY = (
    "node_failure",
    "config_error",
    "dispatcher_error",
    "refit_error",
    "verify_failed",
    "oom",
    "segfault",
    "deepep_timeout",
    "import_error",
    "exception",
    "nccl_error",
    "hang",
    "nccl_timeout",
    "killed",
    "time_limit",
    "cancelled",
    "child_failed",
    "nan",
    "dispatcher_downgrade",
    "log_stops",
)
# What a reader sees for each kind (reports, mbridge_summary.json).
FAILURE_LABELS = {
    "node_failure": "node failure",
    "config_error": "config error",
    "dispatcher_error": "dispatcher error",
    "refit_error": "refit error",
    "verify_failed": "refit verification failed",
    "oom": "out of memory",
    "segfault": "segfault",
    "deepep_timeout": "DeepEP timeout",
    "import_error": "import error",
    "exception": "Python exception",
    "nccl_error": "NCCL error",
    "nccl_timeout": "NCCL timeout",
    "killed": "killed",
    "time_limit": "time limit",
    "cancelled": "cancelled",
    "child_failed": "child process failed",
    "nan": "NaN / Inf",
    "dispatcher_downgrade": "dispatcher downgrade",
    # "hang" and "log_stops" say where (failure_label): "hang at first dispatch", "hang after iteration 12"
    "hang": "hang",
    "log_stops": "hang (the log stops)",
}
_DETAIL_CHARS = 300
# torchrun's failure summary ("error_file: <N/A>" / "traceback : Signal 11 (SIGSEGV) ...") is not a failure line
# itself but announces one that may not contain "rror": it only opens the full search.
_TRIGGER_ONLY = r"^\s*error_file\s*:"
FAILURE_LINE_RE = re.compile("|".join([*(f"(?:{pattern.pattern})" for _, pattern in FAILURE_RULES), _TRIGGER_ONLY]))


# --- markers -------------------------------------------------------------------------------------------------------
ERROR = Marker("error", (b"rror",), keep=FAILURE_LINE_RE)
WATCHDOG = Marker("watchdog", (b"atchdog",), requires="error")
SEGFAULT = Marker("segfault", (b"egmentation fault", b"SIGSEGV"), requires="error")
OOM = Marker("oom", (b"out of memory",), requires="error")
SIGKILL = Marker("sigkill", (b"SIGKILL",), requires="error")
NODE_FAIL = Marker("node_fail", (b"NODE_FAIL",), requires="error")
FAILURE_MARKERS = (ERROR, WATCHDOG, SEGFAULT, OOM, SIGKILL, NODE_FAIL)

EFA = Marker("efa", (b"rovider is efa",), first_only=True)
SOCKET = Marker("socket", (b"Using network Socket", b"NET/Socket"), first_only=True, requires_absent="efa")
UCCL_PROXY = Marker("uccl_proxy", (b"Registered prox",), first_only=True)
UCCL_NIC = Marker("uccl_nic", (b"[RDMA] Selected NIC",), first_only=True, requires="uccl_proxy")
CONTRACT = Marker("contract", (b"MBRIDGE_",))
# every rank's stage and hang lines (payload/train/watchdog.py) and the local launcher's timeout line: few per log
PROGRESS = Marker("progress", (b"MBRIDGE_STAGE ", b"MBRIDGE_HANG ", b"MBRIDGE_LAUNCH_TIMEOUT"))
BRIDGE_SKIP = Marker("bridge_skip", (b"EP configuration", b"dispatcher backend configuration",
                                     b"Falling back to alltoall"))


def job_log_markers(markers: Iterable[Marker]) -> tuple[Marker, ...]:
    """The same markers for a job-level log: every hit, no shortcuts (many ranks may share the file)."""
    return tuple(replace(m, first_only=False, requires=None, requires_absent=None) for m in markers)


# --- where a start stopped: the payload's stage lines (payload/train/watchdog.py) ----------------------------------
_STAGE_RE = re.compile(r"MBRIDGE_STAGE stage=(?P<stage>\S+)")
_HANG_STAGE_RE = re.compile(r"MBRIDGE_HANG class=\S+ stage=(?P<stage>\S+)")
_ITERATION_STAGE_RE = re.compile(r"iteration_(?P<n>\d{1,12})$")
_STAGES = ("init", "model_built", "first_dispatch")


def stage_rank(stage: str) -> tuple[int, int]:
    """Sort key of a stage: init < model_built < first_dispatch < iteration_1 < iteration_2 ..."""
    match = _ITERATION_STAGE_RE.match(stage)
    if match:
        return (len(_STAGES), int(match.group("n")))
    return (_STAGES.index(stage), 0) if stage in _STAGES else (-1, 0)


def stage_words(stage: str) -> str:
    """Where a start stood at a stage, in words: "at init", "at first dispatch", "after iteration 12"."""
    match = _ITERATION_STAGE_RE.match(stage)
    if match:
        return f"after iteration {match.group('n')}"
    return {"init": "at init", "model_built": "at init (model built, no dispatch yet)",
            "first_dispatch": "at first dispatch"}.get(stage, f"at stage {stage}")


def stage_of_line(text: str) -> str | None:
    """The stage an MBRIDGE_STAGE or MBRIDGE_HANG line names (None for any other line)."""
    match = _HANG_STAGE_RE.search(text) or _STAGE_RE.search(text)
    return match.group("stage") if match else None


def failure_label(f: FailureFinding) -> str:
    """What a reader sees for a finding: the kind's words; a hang says where ("hang at first dispatch")."""
    if f.kind in HANG_KINDS:
        stage = f.stage or stage_of_line(f.detail)
        where = stage_words(stage) if stage else "(stage not said)"
        if f.kind == "hang":
            return f"hang {where}"
        return f"hang {where} (no MBRIDGE_HANG line: the log stops there)"
    return FAILURE_LABELS.get(f.kind, f.kind)


def classify_line(text: str) -> str | None:
    for kind, pattern in FAILURE_RULES:
        if pattern.search(text):
            return kind
    return None


# --- records ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FailureFinding:
    kind: str
    detail: str
    source: str
    rank: int | None = None
    count: int = 1
    # a hang's last stage (payload/train/watchdog.py; "iteration_12"): where it stood; None: read from the line
    stage: str | None = None


@dataclass(frozen=True)
class FailureReport:
    """``status``: ok, failed (a finding) or incomplete (no finding, yet the run did not finish)."""

    status: str
    primary: str | None = None
    findings: tuple[FailureFinding, ...] = ()

    @property
    def kinds(self) -> tuple[str, ...]:
        present = {f.kind for f in self.findings}
        return tuple(k for k in FAILURE_PRIORITY if k in present)

    @property
    def first(self) -> FailureFinding | None:
        """The finding the status rests on: the first line of the highest-priority kind, on its lowest rank."""
        return self.findings[0] if self.findings else None

    def reason(self) -> dict[str, object]:
        """The failure as a reader wants it: class (words), the failing rank, its first error line and where."""
        f = self.first
        if f is None:
            return {"failure_class": None, "failure_rank": None, "failure_line": None, "failure_source": None}
        return {
            "failure_class": failure_label(f),
            "failure_rank": f.rank,
            "failure_line": f.detail,
            "failure_source": f.source,
        }

    def ranks(self, kind: str) -> tuple[int, ...]:
        return tuple(sorted({f.rank for f in self.findings if f.kind == kind and f.rank is not None}))


@dataclass(frozen=True)
class DispatcherReport:
    """What was asked for, what Megatron built and which ``deep_ep`` it imported (see the contract above)."""

    config_requested: str | None = None
    requested: str | None = None
    built: str | None = None
    backend: str | None = None
    deep_ep_module: str | None = None
    deep_ep_provider: str | None = None
    bridge_warnings: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def wanted(self) -> str | None:
        return self.requested or self.config_requested

    @property
    def downgraded(self) -> bool | None:
        """True/False when the logs can tell, None when they cannot (no contract line, nothing requested)."""
        wanted = self.wanted
        if wanted is None:
            return None
        if wanted not in FLEX_BACKENDS:
            return False
        if self.bridge_warnings:
            return True
        if self.built is None:
            return None
        return self.built != "flex" or self.backend != wanted


@dataclass(frozen=True)
class ValiditySignals:
    """Per-rank evidence; ``expected_ranks`` is range(world_size), ``ranks_scanned`` the rank logs that had bytes."""

    expected_ranks: tuple[int, ...] = ()
    ranks_scanned: tuple[int, ...] = ()
    efa_ranks: tuple[int, ...] = ()
    efa_fabric: str | None = None
    efa_nics: int | None = None
    socket_ranks: tuple[int, ...] = ()
    uccl_searched_ranks: tuple[int, ...] = ()
    uccl_proxy_ranks: tuple[int, ...] = ()
    uccl_modes: tuple[str, ...] = ()
    uccl_nics: tuple[str, ...] = ()
    dispatcher: DispatcherReport = DispatcherReport()
    nan_iterations: tuple[int, ...] = ()
    nonfinite_grad_norm_iterations: tuple[int, ...] = ()
    skipped_iterations: int = 0

    @property
    def efa_on_all_ranks(self) -> bool:
        expected = self.expected_ranks or self.ranks_scanned
        return bool(expected) and set(expected) <= set(self.efa_ranks)

    @property
    def uccl_active(self) -> bool:
        return bool(self.uccl_proxy_ranks)


# --- builders --------------------------------------------------------------------------------------------------------
def _contract_fields(line: LogLine) -> tuple[str, dict[str, str]] | None:
    match = _CONTRACT_RE.search(line.text)
    if not match or not line.terminated:
        return None
    return match.group("kind"), {m.group("key"): m.group("value") for m in _KV_RE.finditer(match.group("rest"))}


def dispatcher_report(
    contract_lines: Iterable[LogLine], bridge_lines: Iterable[LogLine], config_requested: str | None
) -> DispatcherReport:
    seen: dict[str, set[str]] = {}
    problems: list[str] = []
    for line in contract_lines:
        parsed = _contract_fields(line)
        if parsed is None:
            continue
        kind, fields = parsed
        wanted = ("requested", "built", "backend") if kind == "DISPATCHER" else ("module", "provider")
        for key in wanted:
            value = fields.get(key)
            if value is None or value == "":
                problems.append(f"contract_missing_{key}")
                continue
            allowed = CONTRACT_VALUES.get(key)
            if allowed is not None and value not in allowed:
                problems.append(f"contract_invalid_{key}")
                continue
            seen.setdefault(key, set()).add(value)
    values: dict[str, str | None] = {}
    for key in ("requested", "built", "backend", "module", "provider"):
        found = seen.get(key, set())
        if len(found) > 1:
            problems.append(f"contract_disagrees_{key}")
            values[key] = None
        else:
            values[key] = next(iter(found), None)
    if config_requested and values["requested"] and values["requested"] != config_requested:
        problems.append("config_contract_mismatch")
    warnings = tuple(redact(line.text.strip()) for line in bridge_lines if _BRIDGE_SKIP_RE.search(line.text))
    return DispatcherReport(
        config_requested=config_requested,
        requested=values["requested"],
        built=values["built"],
        backend=values["backend"],
        deep_ep_module=values["module"],
        deep_ep_provider=values["provider"],
        bridge_warnings=warnings,
        problems=tuple(dict.fromkeys(problems)),
    )


_ENGINE_RE = re.compile(r"MBRIDGE_ENGINE\b(?P<rest>.*)$")


def engine_line(contract_lines: Iterable[LogLine]) -> dict[str, str]:
    """``MBRIDGE_ENGINE requested=<auto|bridge|mcore> selected=<bridge|mcore>`` (the training payload prints it once
    on rank 0 before it builds anything): its fields, from the first complete line."""
    for line in contract_lines:
        match = _ENGINE_RE.search(line.text)
        if match and line.terminated:
            return {m.group("key"): m.group("value") for m in _KV_RE.finditer(match.group("rest")) if m.group("value")}
    return {}


_GC_RE = re.compile(r"MBRIDGE_GC manual_gc=(?P<on>True|False) interval=(?P<interval>\d{1,9})\s*$")


def routing_hashes(contract_lines: Iterable[LogLine]) -> Mapping[tuple[int, int], str]:
    """``MBRIDGE_ROUTING rank=<r> iteration=<i> calls=<n> hash=<16 hex>`` (payload/train/routing.py): the fingerprint
    of the routers' expert choices per (rank, iteration). A rank/iteration seen twice with two hashes keeps neither
    (a log of two runs cannot prove anything); ``none`` (no router ran) is kept as such. The parse reads them during
    its scan instead (metrics/routing.py); this is the same for lines a caller holds."""
    from .routing import routing_maps

    return routing_maps(contract_lines)[0]


def dispatcher_times(contract_lines: Iterable[LogLine]) -> Mapping[tuple[int, int], tuple[float, float]]:
    """(dispatch ms, combine ms) inside the MoE token dispatcher by (rank, iteration), from the optional fields of
    ``MBRIDGE_ROUTING`` (payload/train/dispatch_timing.py). Empty for a log without them (an older payload: "not
    recorded"). A rank/iteration seen twice with two values keeps neither, as routing_hashes does."""
    from .routing import routing_maps

    return routing_maps(contract_lines)[1]


def gc_interval(contract_lines: Iterable[LogLine]) -> int | None:
    """``MBRIDGE_GC manual_gc=<bool> interval=<n>``: Bridge's manual garbage collection every n steps (0: none), None
    when the run did not say."""
    for line in contract_lines:
        match = _GC_RE.search(line.text)
        if match and line.terminated:
            return int(match.group("interval")) if match.group("on") == "True" else 0
    return None


def _rank_of(rank: int | None, line: LogLine) -> int | None:
    return rank if rank is not None else line.label_rank


def validity_signals(
    files: Iterable[tuple[int | None, FileScan]],
    dispatcher: DispatcherReport,
    *,
    world_size: int | None = None,
    nan_iterations: Iterable[int] = (),
    nonfinite_grad_norm_iterations: Iterable[int] = (),
    skipped_iterations: int = 0,
) -> ValiditySignals:
    """Fold per-file hits into per-rank evidence; ``rank`` is None for a job-level log (labels decide there)."""
    scanned: set[int] = set()
    efa: set[int] = set()
    socket: set[int] = set()
    uccl_searched: set[int] = set()
    uccl: set[int] = set()
    modes: set[str] = set()
    nics: set[str] = set()
    fabric: str | None = None
    nic_count: int | None = None
    for rank, scan in files:
        if rank is not None and scan.status == "ok":
            scanned.add(rank)
            if UCCL_PROXY.name in scan.searched:
                uccl_searched.add(rank)
        for line in scan.lines(EFA.name):
            match = _EFA_RE.search(line.text)
            owner = _rank_of(rank, line)
            if match and owner is not None:
                efa.add(owner)
                fabric = fabric or match.group("fabric")
                if match.group("nics") and nic_count is None:
                    nic_count = int(match.group("nics"))
        for line in scan.lines(SOCKET.name):
            owner = _rank_of(rank, line)
            if _SOCKET_RE.search(line.text) and owner is not None:
                socket.add(owner)
        for line in scan.lines(UCCL_PROXY.name):
            match = _UCCL_PROXY_RE.search(line.text)
            owner = _rank_of(rank, line)
            if match and owner is not None:
                uccl.add(owner)
                if match.group("mode"):
                    modes.add(match.group("mode"))
        for line in scan.lines(UCCL_NIC.name):
            match = _UCCL_NIC_RE.search(line.text)
            if match:
                nics.add(match.group("nic"))
    return ValiditySignals(
        expected_ranks=tuple(range(world_size)) if world_size else (),
        ranks_scanned=tuple(sorted(scanned)),
        efa_ranks=tuple(sorted(efa)),
        efa_fabric=fabric,
        efa_nics=nic_count,
        socket_ranks=tuple(sorted(socket - efa)),
        uccl_searched_ranks=tuple(sorted(uccl_searched)),
        uccl_proxy_ranks=tuple(sorted(uccl)),
        uccl_modes=tuple(sorted(modes)),
        uccl_nics=tuple(sorted(nics)),
        dispatcher=dispatcher,
        nan_iterations=tuple(sorted(set(nan_iterations))),
        nonfinite_grad_norm_iterations=tuple(sorted(set(nonfinite_grad_norm_iterations))),
        skipped_iterations=skipped_iterations,
    )


def failure_findings(
    files: Iterable[tuple[str, int | None, FileScan]], extra_markers: Iterable[str] = ()
) -> list[FailureFinding]:
    """One finding per (file, kind, rank): the first such line, with how many lines of it there were.

    In a rank log the rank is the file's; in a job-level log it is the line's label (None when unlabelled).
    ``extra_markers`` adds other markers' lines (the payloads' ``MBRIDGE_*`` / ``REFIT_*`` lines carry their errors).
    """
    names = [*(m.name for m in FAILURE_MARKERS), *extra_markers]
    findings: list[FailureFinding] = []
    for source, rank, scan in files:
        first: dict[tuple[str, int | None], FailureFinding] = {}
        counts: dict[tuple[str, int | None], int] = {}
        seen: set[int] = set()
        for name in names:
            for line in scan.lines(name):
                if line.offset in seen:
                    continue
                seen.add(line.offset)
                kind = classify_line(line.text)
                if kind is None:
                    continue
                key = (kind, _rank_of(rank, line))
                counts[key] = counts.get(key, 0) + 1
                if key not in first:
                    first[key] = FailureFinding(
                        # redacted here: the line goes into summaries, CSVs and pages (issue 32); cut after redacting
                        # so that a cut never leaves the head of a token whole enough to read
                        kind=kind, detail=redact(line.text.strip())[:_DETAIL_CHARS], source=source, rank=key[1]
                    )
        findings.extend(replace(f, count=counts[k]) for k, f in first.items())
    return findings


HANG_KINDS = ("hang", "log_stops")  # a start that stopped making progress: a failed start, its iterations no time
LAUNCH_TIMEOUT = "MBRIDGE_LAUNCH_TIMEOUT"  # payload/refit/local.py launch: it ended this rank at its per-run timeout


def log_stops(files: Iterable[tuple[str, int | None, FileScan]], last_iteration: int | None) -> FailureFinding | None:
    """For a run that did not finish and left no failure line: where its ranks' logs stop, from the payload's stage
    lines (payload/train/watchdog.py), as a ``log_stops`` finding (a hang the watchdog did not report: killed from
    outside, or the watchdog off). The rank furthest behind names the stage; iterations logged later than its last
    stage line move it on ("after iteration N"). None when no log has a stage line."""
    last: dict[int | None, tuple[str, str, str]] = {}
    launcher = None
    for source, rank, scan in files:
        for line in scan.lines(PROGRESS.name):
            owner = _rank_of(rank, line)
            stage = stage_of_line(line.text)
            if stage is not None and "MBRIDGE_STAGE" in line.text:
                last[owner] = (stage, line.text.strip(), source)
            elif LAUNCH_TIMEOUT in line.text and launcher is None:
                launcher = line.text.strip()
    if not last:
        return None
    rank, (stage, text, source) = min(last.items(), key=lambda kv: (stage_rank(kv[1][0]), kv[0] if kv[0] is not None
                                                                     else -1))
    if last_iteration and stage_rank(stage) < stage_rank(f"iteration_{last_iteration}"):
        stage = f"iteration_{last_iteration}"
    detail = f"the log stops after `{text}`" + (f"; {launcher}" if launcher else "; no exit line")
    return FailureFinding("log_stops", redact(detail)[:_DETAIL_CHARS], source, rank, stage=stage)


def failure_report(findings: Iterable[FailureFinding], *, complete: bool) -> FailureReport:
    ordered = sorted(findings, key=lambda f: (FAILURE_PRIORITY.index(f.kind), f.rank if f.rank is not None else -1))
    if ordered:
        return FailureReport(status="failed", primary=ordered[0].kind, findings=tuple(ordered))
    return FailureReport(status="ok" if complete else "incomplete")


def config_str(config: Mapping[str, object], key: str) -> str | None:
    value = config.get(key)
    return value if isinstance(value, str) and value else None


def order_problems(
    problems: Iterable[str], order: tuple[str, ...], promote: tuple[str, str] | None = None
) -> tuple[str, tuple[str, ...]]:
    """(status, problems): the first problem in ``order`` is the status (``ok`` when none is); the listed ones come
    first, then the details, each once. ``promote=(a, b)`` moves ``a`` just before ``b`` when both are there: a
    missing log file explains missing numbers better than their absence does."""
    unique = list(dict.fromkeys(problems))
    ordered = [p for p in order if p in unique]
    if promote is not None and all(p in ordered for p in promote):
        ordered.remove(promote[0])
        ordered.insert(ordered.index(promote[1]), promote[0])
    details = [p for p in unique if p not in order]
    return (ordered[0] if ordered else "ok"), tuple(ordered + details)


class Capped(list):
    """The messages of a log's damaged or odd lines, the first LISTED of them kept, the rest only counted (``dropped``):
    a log of 10^6 such lines gives 20 messages and a count, not 10^6 strings. ``done()`` is the tuple to report."""

    LISTED = 20

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def append(self, item: str) -> None:  # type: ignore[override]
        if len(self) < self.LISTED:
            super().append(item)
        else:
            self.dropped += 1

    @property
    def total(self) -> int:
        return len(self) + self.dropped

    def done(self) -> tuple[str, ...]:
        return (*self, f"and {self.dropped:,} more like these") if self.dropped else tuple(self)
