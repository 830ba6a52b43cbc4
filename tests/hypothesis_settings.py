"""The settings both property-based test modules run hypothesis with (test_properties_models.py and
metrics/test_properties_logs.py): derandomized and without an example database, so CI runs the same examples every
time and writes nothing into the checkout."""

from __future__ import annotations

import contextlib
import warnings

from hypothesis import HealthCheck, settings

with warnings.catch_warnings():
    # hypothesis imports libcst to print a failing example as a patch; libcst's import warns (mypy_extensions), which
    # the pytest config turns into an error that would hide the failure: import it here, warnings off
    warnings.simplefilter("ignore", DeprecationWarning)
    with contextlib.suppress(ImportError):
        import hypothesis.extra._patching  # noqa: F401

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
