"""Field types and checks both workloads' cmd_args share: strict, bounded, and with the fix in the message."""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, Field, StrictBool, StrictInt
from pydantic_core import PydanticCustomError

INT32_MAX = 2**31 - 1  # Megatron and torch carry these counts in int32 in places (and no run needs more)

# Strict: a TOML "8", 8.0 or true is refused, never coerced into 8 / 1; bounded to what the payload can carry.
PosInt = Annotated[StrictInt, Field(ge=1, le=INT32_MAX)]
NonNegInt = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
# A parallel size (tp, pp, vp, cp, ep, etp): the largest clusters have ~1e5 GPUs; 65536 keeps the plan's per-stage
# tables (built for the memory estimate) small, where pp = 1e8 ran out of memory.
Parallel = Annotated[StrictInt, Field(ge=1, le=65536)]
LayerCount = Annotated[StrictInt, Field(ge=0, le=1024)]
# torch.manual_seed takes a 64-bit value; below 2**63 it is also a valid signed int64 everywhere it is passed on.
Seed = Annotated[StrictInt, Field(ge=0, lt=2**63)]
Bool = StrictBool  # "yes" / "no" / 1 are refused, not read as true / false


def physical(lo: int, hi: int, why: str) -> AfterValidator:
    """A count's physical range: a value outside it is a typo (10**9 steps, a 10**12-token sequence), refused with
    the range and why it ends there (cli/friendly.py says it as "must be from lo to hi (why)")."""

    def check(value: int) -> int:
        if not lo <= value <= hi:
            raise PydanticCustomError("physical_range", "must be from {lo} to {hi} ({why})",
                                      {"lo": lo, "hi": hi, "why": why})
        return value

    return AfterValidator(check)


def Count(lo: int, hi: int, why: str) -> object:  # noqa: N802 (a type, spelled as one)
    return Annotated[StrictInt, physical(lo, hi, why)]


# Counts a test definition reads, each in its physical range (issue 46): beyond it no run could be meant.
Steps = Count(1, 10_000_000, "training steps: the longest pretraining runs take about a million")
Repeats = Count(1, 100_000, "timed repeats of a benchmark: a day at one second each")
SeqLength = Count(1, 1 << 24, "tokens per sequence: 16 Mi, 16 times the longest context models train with")
BatchSize = Count(1, 1 << 22, "sequences per step: the largest published batches are about 16 thousand")
GPUCount = Count(1, 1 << 20, "GPUs: a million, ten times the largest clusters")
MiB = Count(0, 1 << 20, "MiB: 1 TiB, more than any GPU's memory")
ModelLayers = Count(1, 1024, "layers: the largest models have about 100")
StageLayers = Count(1, 1024, "layers of one pipeline stage: the largest models have about 100 in all")
WarmupSteps = Count(0, 10_000, "steps before a CUDA graph is captured: Megatron's default is 3")
InflightOffloads = Count(0, 1024, "offloads in flight per module: one per layer at most, and no model has 1024")
HangTimeout = Count(0, 7 * 24 * 3600, "seconds without progress before a rank reports a hang and exits, 0 = off: "
                    "at most a week, as a refit's timeout_s")

_IMAGE = re.compile(r"^[^\s\x00-\x1f\x7f]+$")
_HF_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")


def has_control(value: str) -> bool:
    """A control character, or an invisible format one (soft hyphen, zero-width and bidi marks: Unicode Cf), which
    no path needs and which the toml package CloudAI writes test-run.toml with mangles."""
    return any(ord(c) < 32 or ord(c) == 127 or unicodedata.category(c) == "Cf" for c in value)


def check_image(value: str | None) -> str | None:
    if value is None:
        return None
    if not _IMAGE.match(value):
        raise ValueError(f"container_image {value!r} is not an image reference (empty, or it has spaces or control "
                         "characters). Fix: write e.g. \"nvcr.io/nvidia/nemo:26.04.01\", or remove the key to run "
                         "without a container")
    return value


# The interpreter a job starts: an absolute path, or a command name looked up on the node's PATH. Never a word that
# starts with '-': it follows srun's options on the job's line, where "--help" or "-c" would be read as srun's own.
_PYTHON = re.compile(r"/[^\x00-\x20\x7f]*|[A-Za-z0-9_.+][A-Za-z0-9_.+-]*")


def check_python(value: str | None) -> str | None:
    if value is not None and not _PYTHON.fullmatch(value):
        raise ValueError(f"python {value!r} is not an interpreter: give an absolute path (/opt/venv/bin/python3) or a "
                         "command name on the nodes' PATH (python3), without spaces or a leading '-'. Fix: e.g. "
                         "python = \"/usr/bin/python3\", or remove the key (python3 in a container, else the "
                         "interpreter that runs CloudAI)")
    return value


def check_hf_model_id(value: str | None) -> str | None:
    if value is None:
        return None
    if PurePosixPath(value).is_absolute() and not has_control(value):
        return value
    if ".." in value or not _HF_REPO_ID.match(value):
        raise ValueError(f"hf_model_id {value!r} is neither a Hugging Face repo id nor an absolute path. Fix: write "
                         "e.g. \"moonshotai/Kimi-K2-Base\" or the absolute path of a pre-staged copy")
    return value


def check_expected_rejections(value: object, known: tuple[str, ...], template: str) -> object:
    """``expected_rejections``: one string of comma-separated rule ids, each a rule of the workload."""
    if isinstance(value, list):
        raise ValueError("expected_rejections is one string of comma-separated rule ids (a TOML list would make it a "
                         f"sweep). Fix: write expected_rejections = \"{', '.join(map(str, value))}\"")
    if not isinstance(value, str):
        return value  # the str type reports it
    unknown = [r for r in rule_ids(value) if r not in known]
    if unknown:
        raise ValueError(f"expected_rejections names no rule of {template}: {', '.join(unknown)}. Fix: use the id in "
                         f"brackets of the rejection message; {template}'s rules are {', '.join(known)}")
    return value


def rule_ids(value: str) -> frozenset[str]:
    return frozenset(r.strip() for r in value.split(",") if r.strip())
