"""Issue 14: secret-looking values are redacted, by name and by shape, in everything the CLI prints or logs."""

from __future__ import annotations

import io
import logging

import pytest

from cloudai_mbridge.redact import (
    REDACTED,
    SECRET_NAME,
    RedactingFilter,
    RedactingStream,
    looks_random,
    redact,
    remember,
    secret_value_problem,
    text_secret_problem,
)

HF = "hf_" + "Zq7TkLmW3xVbN9pR2sYdHc4gJ8fA6eUoQi"
WANDB = "9f1c2ab7e44d0b6358c1f2a9e07d5b34c6a8e912"


@pytest.mark.parametrize(("text", "secret"), [
    ("{'FI_PROVIDER': 'efa', 'HF_TOKEN': 'plain-words-1'}", "plain-words-1"),  # CloudAI's dict echo
    ('HF_TOKEN = "two words"', "two words"),  # TOML
    ("export WANDB_API_KEY=abc123xyz;", "abc123xyz"),  # shell
    ('{"hf_token": "x\\"y-9"}', 'x\\"y-9'),  # JSON, escaped quote inside
    ("--hf-token=abc123", "abc123"),
    ("AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI", "wJalrXUtnFEMI"),
    (f"hf_model_id {HF} is not a repo", HF),  # by shape, any context
    (f"value={WANDB}.", WANDB),
    (f"local-{WANDB}", WANDB),
    ("nvapi-" + "a" * 30, "nvapi-" + "a" * 30),
    ("ghp_" + "b" * 36, "ghp_" + "b" * 36),
    ("AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
    # issue 26: glued to other text, in a URL, the Kubernetes credentials setting
    (f"bench-x{HF}_2026", HF),
    ("clone https://bot:Pa55w0rd@git.example/a.git", "Pa55w0rd"),
    ("CLOUDAI_MBRIDGE_K8S_CREDENTIALS = 'rawtoken123'", "rawtoken123"),
    ("HF_TKN=shapeless-1", "shapeless-1"),
])
def test_secrets_are_redacted(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out and REDACTED in out


@pytest.mark.parametrize("text", [
    "tokens_per_sec: 1234", "num_tokens=5", "TOKENIZERS_PARALLELISM=false", "hf_model_id = moonshotai/Kimi-K2-Base",
    "iteration 10/20 | elapsed time per iteration (ms): 5123.4", "extra_env_vars.HF_TOKEN=<redacted>",
    "--export=ALL,HF_TOKEN=$HF_TOKEN", 'write {"HF_TOKEN": "<secret-name>:<key>"}', "https://git.example/a.git",
])
def test_ordinary_text_is_kept(text: str) -> None:
    assert redact(text) == text


def test_values_of_secret_environment_variables_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "opaque-value-42")
    assert redact("connecting with opaque-value-42 now") == f"connecting with {REDACTED} now"


@pytest.mark.parametrize(("name", "is_secret"), [
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("WANDB_API_KEY", True), ("NGC_API_KEY", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD", True), ("token", True), ("HF_TKN", True),
    ("TOKENIZERS_PARALLELISM", False), ("num_tokens", False), ("CLOUDAI_MBRIDGE_K8S_CREDENTIALS", False),
    ("NCCL_DEBUG", False),
])
def test_secret_names(name: str, is_secret: bool) -> None:
    assert bool(SECRET_NAME.search(name)) is is_secret


def test_shapes_refused_in_generated_files() -> None:
    assert secret_value_problem("hf_model_id", HF) == "has the shape of an access token"
    assert secret_value_problem("WANDB_KEYFILE", WANDB) == "has the shape of a W&B API key"
    assert secret_value_problem("GIT_COMMIT", WANDB) is None  # a commit id under a plain name is not refused
    assert secret_value_problem("hf_model_id", "moonshotai/Kimi-K2-Base") is None


@pytest.mark.parametrize(("text", "why"), [
    (f"--comment={HF}", "shape of an access token"),
    (f"--comment=run{HF}", "shape of an access token"),
    ("--export=ALL,AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "by name"),
    ('{"WANDB_API_KEY": "abc"}', "by name"),
    ("--password=hunter22", "by name"),
    ("https://bot:Pa55w0rd@git.example/a.git", "URL with a password"),
    ("--export=ALL,HF_TOKEN=$HF_TOKEN", None),  # a reference to the variable, not its value
    ("/models/hf-token:/root/token", None),  # a mount of a token file: src:dst, not NAME=value
    ("hf-token:token", None),  # a Kubernetes Secret's name:key
    ("HF_TOKEN=/run/secrets/hf", None),  # a path to the secret, not the secret
    ("--comment=https://git.example/a.git", None),
])
def test_free_text_secrets(text: str, why: str | None) -> None:
    found = text_secret_problem(text)
    assert (found is None) if why is None else (why in found)


@pytest.mark.parametrize(("value", "random"), [
    ("q8ZtR2mXv7LkP4sW9nB3cY6hJ1dF5gA0", True), ("abcdefghijklmnopqrstuvwxyz012345", True),
    ("wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY1", True),
    (WANDB, False), ("123e4567-e89b-12d3-a456-426614174000", False), ("nvidia_dsv3_gb200_fp8_mx_large_scale", False),
    ("/opt/amazon/efa/lib64/libfabric1234567", False), ("8388608", False), ("^docker,lo,veth", False),
    ("DeepseekV3ForCausalLM", False), ("s3cr3tRawTokenValue99", False),  # shorter than 24
])
def test_random_looking_environment_values(value: str, random: bool) -> None:
    assert looks_random(value) is random
    assert (secret_value_problem("MY_SETTING", value, environment=True) is not None) is random


def test_a_remembered_value_is_redacted_wherever_it_turns_up() -> None:
    remember("no-shape-at-all-77")
    assert redact("input_value={'X': '...'no-shape-at-all-77'}") == f"input_value={{'X': '...'{REDACTED}'}}"


def test_stream_and_log_handlers_redact() -> None:
    sink = io.StringIO()
    RedactingStream(sink).write(f"token {HF}\n")
    assert HF not in sink.getvalue() and REDACTED in sink.getvalue()

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.addFilter(RedactingFilter())
    log = logging.getLogger("redact-test")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.error("global_env_vars %s", {"HF_TOKEN": "s3cr3t-value"})
        try:
            raise ValueError(f"bad {HF}")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    text = buf.getvalue()
    assert "s3cr3t-value" not in text and HF not in text
    assert text.count(REDACTED) >= 2 and "ValueError" in text


# Issue 32: inputs that made the credential-by-name and URL patterns backtrack (25 s for "ab-" * 16000, 30-60 s for
# a 100,000-character name or a 24 KB hyphenated description). Each is ~1 MB here; a linear pattern takes well under
# a second, a quadratic one minutes. The bound is a guard against that blow-up, not a benchmark: it is the best of
# two tries (a busy CI machine can stall one) and 4 s for 1 MB.
_PATHOLOGICAL = {
    "hyphenated-words": "ab-" * 350_000,
    "one-long-name": "a" * 1_000_000,
    "underscored-credential-words": "x_TOKEN-" * 130_000,
    "names-without-separator": "HF_TOKEN " * 115_000,
    "separators-without-value": "API_KEY=," * 115_000,
    "unclosed-double-quotes": 'TOKEN="' * 150_000,
    "unclosed-single-quotes": "SECRET='" * 130_000,
    "backslashes-in-a-quote": 'HF_TOKEN="' + "\\" * 1_000_000,
    "spaces-after-a-name": "PASSWORD" + " " * 1_000_000,
    "dotted-schemes": "a.b" * 350_000 + "://",
    "url-without-at": "x://u:" + "p:" * 500_000,
    "many-schemes": "http://" * 150_000,
    "colons": "ab:" * 350_000,
    "hf-prefixes": "hf_" * 350_000,
    "hex-runs": ("0" * 39 + "-") * 25_000,
}


@pytest.mark.parametrize("text", list(_PATHOLOGICAL.values()), ids=list(_PATHOLOGICAL))
def test_redaction_takes_linear_time_on_pathological_text(text: str) -> None:
    import time

    def best(fn) -> float:
        times = []
        for _ in range(2):
            start = time.process_time()
            fn(text)
            times.append(time.process_time() - start)
        return min(times)

    assert best(redact) < 4.0
    assert best(text_secret_problem) < 4.0
    assert best(lambda t: secret_value_problem("MY_SETTING", t, environment=True)) < 4.0


@pytest.mark.parametrize(("text", "shown"), [
    ('HF_TOKEN="abc\\"def', 'HF_TOKEN="' + REDACTED),  # a quote that never closes: hidden to the line's end
    ("x AWS_SECRET_ACCESS_KEY='s3cr3t\nnext line", "x AWS_SECRET_ACCESS_KEY='" + REDACTED + "\nnext line"),
    ("a-b-c-HF_TOKEN=abcdef123", "a-b-c-HF_TOKEN=" + REDACTED),
    ("1.https://user:Pa55w0rd@host/x", "1.https://user:" + REDACTED + "@host/x"),
])
def test_unusual_spellings_are_still_redacted(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert text_secret_problem(text) is not None
