"""Issue 46 (report time): ``redact`` skips a pattern's scan where the text lacks what the pattern needs. What it
shows must be what every pattern run on the whole text shows, for any text: random texts built of the pieces the
patterns look for (tokens, names, 40 hex digits, URLs with passwords, commit ids), near misses and filler."""

from __future__ import annotations

import random
import string

import pytest

from cloudai_mbridge import redact as red

PIECES = (
    "hf_" + "a1B2" * 8, "hf_short", "nvapi-" + "x_-9" * 6, "ghp_" + "Z9" * 11, "github_pat_" + "q" * 22, "gh_nope",
    "AKIA" + "ABCDEFGH12345678", "xAKIA" + "ABCDEFGH12345678", "wandb_v1_" + "k" * 21, "0123456789abcdef" * 3,
    "commit " + "ab" * 20, "@" + "cd" * 20, "local-" + "ef" * 20, "deadbeef" * 4, "https://user:pw0rd@host/x",
    "s3://bucket/key", "HF_TOKEN=abc123", "api_key: 'zz9'", '"WANDB_API_KEY": "v4lue"', "Api-Key = x1",
    "PassPhrase=y", "my_tkn=z", "SECRET_KEY=$HOME", "token", "tokens=3", "AUTH_KEY:<redacted>", "CREDENTIALS=a,b",
    "kv_channels", "step_time_sec", "0.6811", "1e-05", "12345678901234567890", '{"loss": 10.5}', " | ", "\n",
    "\t", ",", "=", ":", "'", '"', "\\", "to\u212aen=kelvin", "\u017fecret=longs", "ap\u0131_key=dotless",
    "caf\u00e9", "x" * 39,
)


def _text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 12)):
        parts.append(rng.choice(PIECES) if rng.random() < 0.6 else "".join(
            rng.choice(string.ascii_letters + string.digits + "_-:=/@ ") for _ in range(rng.randint(1, 12))))
    return "".join(parts)


@pytest.mark.parametrize("seed", range(8))
def test_what_redact_shows_is_what_every_pattern_shows(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        text = _text(rng)
        assert red._redact_shapes(text, prefilter=text.isascii()) == red._redact_shapes(text, prefilter=False), text


def test_a_text_of_numbers_is_returned_as_it_is_and_a_secret_beside_them_is_not() -> None:
    numbers = '{\n  "iteration": 12,\n  "step_time_sec": 0.6811,\n  "loss": 10.49\n}' * 100
    assert red.redact(numbers) == numbers
    leaked = numbers + '"HF_TOKEN": "' + "hf_" + "a1B2" * 8 + '"'
    assert "a1B2" not in red.redact(leaked) and red.redact(leaked).startswith(numbers)
