"""The rule mechanism: small functions from a plan to violations, collected in named rule sets.

A rule is a generator function decorated with ``RuleSet.rule``; it yields a :class:`Violation` per problem. Its
docstring says which Megatron-Core / Megatron-Bridge check it mirrors (file and line), so a reader can see why a
sweep point was skipped without running anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

P = TypeVar("P")


@dataclass(frozen=True)
class Violation:
    rule: str
    fields: dict[str, object]
    message: str
    fix: str

    def __str__(self) -> str:
        text = self.__dict__.get("_text")
        if text is None:  # made once: a sweep's table, its CSV and its counts all show it
            values = ", ".join(f"{k}={show_value(v)}" for k, v in self.fields.items())
            text = self.__dict__["_text"] = f"[{self.rule}] {self.message} ({values}). Fix: {self.fix}"
        return text


def show_value(value: object) -> str:
    """A value as the TOML files write it (no Python reprs): "text", true / false, unset for None, and a table as
    {tp=2, ep=2} without its unset keys."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={show_value(v)}" for k, v in value.items() if v is not None) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    return str(value)


class PointRejectedError(ValueError):
    """A single (non-swept) point that Megatron would reject: generation stops before anything is written."""

    def __init__(self, name: str, violations: list[Violation]) -> None:
        self.violations = violations
        super().__init__(f"{name}: Megatron would reject this point:\n  " + "\n  ".join(map(str, violations)))


@dataclass
class RuleSet(Generic[P]):
    name: str
    rules: dict[str, Callable[[P], Iterable[Violation]]] = field(default_factory=dict)

    def rule(self, rule_id: str) -> Callable[[Callable[[P], Iterator[Violation]]], Callable[[P], Iterator[Violation]]]:
        def register(fn: Callable[[P], Iterator[Violation]]) -> Callable[[P], Iterator[Violation]]:
            if rule_id in self.rules:
                raise ValueError(f"rule id {rule_id!r} registered twice in rule set {self.name!r}")
            self.rules[rule_id] = fn
            return fn

        return register

    def check(self, plan: P) -> list[Violation]:
        found: list[Violation] = []
        for rule_id, fn in self.rules.items():
            for v in fn(plan):
                found.append(v if v.rule == rule_id else Violation(rule_id, v.fields, v.message, v.fix))
        return found
