"""The range a language model's training loss can physically take, so a finite but absurd loss gives no verdict.

``lm loss`` is the mean token cross-entropy over the model's vocabulary of V tokens, in nats: never below 0 (a
probability is at most 1), and ln(V) for a model that has learnt nothing (a uniform guess: 12.0 for Kimi-K2's 163,840
tokens, 11.8 for DeepSeek-V3's 129,280). A run that diverges can spike above ln(V), so the ceiling is CEILING_FACTOR
times it; a loss beyond (1e30), below 0 or not finite is a damaged or edited log, or no training at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

CEILING_FACTOR = 3
# When the vocabulary is not known (a golden-values file carries none): 2^20 tokens, four times the largest in use.
LARGEST_VOCAB = 1 << 20


def vocab_of(config: Mapping[str, Any]) -> int | None:
    """The vocabulary size of a run's mbridge_config.json (its ``model`` facts), or None."""
    model = config.get("model")
    vocab = model.get("vocab_size") if isinstance(model, Mapping) else None
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 1 else None


def ceiling(vocab: int | None) -> float:
    return CEILING_FACTOR * math.log(vocab or LARGEST_VOCAB)


def loss_problem(value: float, vocab: int | None) -> str | None:
    """Why ``value`` cannot be a language model's cross-entropy over ``vocab`` tokens, or None."""
    top = ceiling(vocab)
    if not math.isfinite(value) or 0 <= value <= top:
        return None  # a NaN / Inf has its own finding (nan)
    v = vocab or LARGEST_VOCAB
    where = "below 0, which no cross-entropy is" if value < 0 else f"above {top:.1f}"
    return (f"lm loss {value:g} is {where}: a language model's cross-entropy over {v:,} tokens is "
            f"from 0 to ln({v:,}) = {math.log(v):.2f} untrained, {CEILING_FACTOR} x that at most when diverging")
