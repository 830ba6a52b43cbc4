"""What the training and refit test definitions share: credentials, the container image, checking, run status."""

from __future__ import annotations

import logging
import pickle
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

from cloudai.core import DockerImage, Installable, JobStatusResult, Registry, System, TestRun
from cloudai.models.workload import TestDefinition
from pydantic import PrivateAttr, field_validator

from ..launch.kubernetes import SCHEDULER as K8S_SCHEDULER
from ..redact import redact, text_secret_problem
from ..rules import Violation
from ..rules.base import show_value
from ..systems.common import (
    container_image,
    env_name_violations,
    env_value_violations,
    redact_secret_env,
    secret_env_violations,
    secret_field_violations,
    system_env,
)
from .fields import rule_ids
from .reporting import run_status

# Who wants to know that a point was rejected (the CLI's session counts them, cli/session.py): registered by the
# layer above, so that the workloads never import the command line.
_rejection_listeners: list[Callable[[str], None]] = []


def add_rejection_listener(listener: Callable[[str], None]) -> None:
    _rejection_listeners.append(listener)


def remove_rejection_listener(listener: Callable[[str], None]) -> None:
    if listener in _rejection_listeners:
        _rejection_listeners.remove(listener)


def note_rejected(name: str) -> None:
    """Test run ``name`` had a point rejected by a rule: tell every registered listener."""
    for listener in list(_rejection_listeners):
        listener(name)


class MBridgeTestDefinition(TestDefinition):
    _images: dict[str, DockerImage] = PrivateAttr(default_factory=dict)

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Any:
        """The same deep copy as pydantic's, through pickle, in 40 % of the time: CloudAI's reporters deep-copy the
        test run once per run folder, a dozen reporters per report (12,000 copies at 1,000 runs). A definition that
        does not pickle is copied by pydantic."""
        try:
            copied = pickle.loads(pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:
            return super().__deepcopy__(memo)
        if memo is not None:
            memo[id(self)] = copied
        return copied

    @field_validator("extra_env_vars", mode="before")
    @classmethod
    def _redact_secrets(cls, v: Any) -> Any:
        return redact_secret_env(v)

    @field_validator("description", mode="before")
    @classmethod
    def _redact_description(cls, v: Any) -> Any:
        """A secret in the description (free text nothing runs) is redacted where it is read, so test-run.toml and
        the logs never show it; secrets elsewhere in the test are refused (inputs.py, the no-secrets-in-toml rule)."""
        return redact(v) if text_secret_problem(v) else v

    @property
    def docker_image(self) -> DockerImage | None:
        return container_image(self.cmd_args.container_image, self._images)

    @property
    def installables(self) -> list[Installable]:
        image = self.docker_image
        return [*([image] if image else []), *self.git_repos]

    @property
    def expected_rejections(self) -> frozenset[str]:
        """The rule ids whose rejections of sweep points the test declares intended (cmd_args.expected_rejections)."""
        return rule_ids(self.cmd_args.expected_rejections)

    def rejection_expected(self, found: list[Violation]) -> bool:
        return bool(found) and {v.rule for v in found} <= self.expected_rejections

    @abstractmethod
    def rule_violations(self, tr: TestRun, system: System | None) -> list[Violation]:
        """What Megatron / the payload would reject at this (unrolled) sweep point."""

    def checked_plan(self, tr: TestRun, system: System | None) -> tuple[list[Violation], Any]:
        """:meth:`rule_violations` and the plan they were found on, for a caller that needs both (preflight); a
        workload that builds its plan inside its rules returns None for it."""
        return self.rule_violations(tr, system), None

    def describe(self, tr: TestRun, system: System | None) -> str | None:
        """A line worth seeing at dry-run for every point (e.g. the memory estimate)."""
        return None

    def cautions(self, tr: TestRun, system: System | None) -> list[str]:
        """What will work but deserves a warning before GPUs are spent (e.g. a download on the compute nodes);
        logged when the point's job is generated (systems/common.py open_run_dir)."""
        return []

    def secret_violations(self, system: System | None) -> list[Violation]:
        """Credentials written in the test or the system (they would land in the job's files)."""
        return [
            *secret_env_violations(self.extra_env_vars, "extra_env_vars"),
            *secret_env_violations(system_env(system), "global_env_vars"),
            *env_value_violations(system),
            *env_name_violations(self.extra_env_vars, "extra_env_vars", f"of test {self.name!r} (its test file, or "
                                 "the scenario's [[Tests]] entry)"),
            *env_name_violations(system_env(system), "global_env_vars", "of the system file"
                                 + (f" ({system.name})" if system is not None else "")),
            *secret_field_violations(self.cmd_args),
        ]

    def violations(self, tr: TestRun, system: System | None) -> list[Violation]:
        kind = self.system_kind_violations(system)
        if kind:  # no job of ours can be written for this system: the other rules' verdicts would not matter
            return [*self.secret_violations(system), *kind]
        return [*self.secret_violations(system), *self.rule_violations(tr, system)]

    def system_kind_violations(self, system: System | None) -> list[Violation]:
        """A system type for which the plugin writes no job of this test's kind (CloudAI's Registry has no strategy
        for the pair, looked up by the exact system type as CloudAI does), e.g. CloudAI's own scheduler "kubernetes"
        (one object per job) where ours is "mbridge_kubernetes"."""
        if system is None:
            return []
        reg = Registry()
        if (type(system), type(self)) in reg.command_gen_strategies_map or (
                type(system), type(self)) in reg.json_gen_strategies_map:
            return []
        pairs = {*reg.command_gen_strategies_map, *reg.json_gen_strategies_map}
        schedulers = {cls: name for name, cls in reg.systems_map.items()}
        supported = sorted({schedulers.get(s, s.__name__) for s, t in pairs if t is type(self)})
        fix = "run it on a system file of one of those" + (
            f'; for Kubernetes write scheduler = "{K8S_SCHEDULER}" in the system file (CloudAI\'s "kubernetes" '
            "system creates one object per job, a training or refit job needs a ConfigMap, a Service and Jobs; "
            "conf/system/k8s_generic.toml is an example)" if K8S_SCHEDULER in supported else "")
        return [Violation("system-kind", {"system": system.name, "scheduler": getattr(system, "scheduler", "?")},
                          f"the plugin writes {self.test_template_name} jobs for scheduler "
                          f"{', '.join(show_value(n) for n in supported)}, not for this system's", fix)]

    def constraint_check(self, tr: TestRun, system: System | None) -> bool:
        found = self.violations(tr, system)
        note = self.describe(tr, system)
        if note:
            logging.info("%s: %s", tr.name, note)
        expected = self.rejection_expected(found)
        for v in found:
            if expected:  # declared in expected_rejections: not an error
                logging.info("%s: skipped as expected (expected_rejections): %s", tr.name, v)
            else:
                logging.error("%s: rejected: %s", tr.name, v)
        if found:
            note_rejected(tr.name)
        return not found

    def was_run_successful(self, tr: TestRun) -> JobStatusResult:
        return run_status(tr.output_path)
