import os

import pytest


@pytest.fixture(autouse=True)
def _restore_environment():
    """Payload entry points export RANK/WORLD_SIZE/... into os.environ (as a real rank must); keep that out of later
    tests, whose child processes (sbatch --export=ALL) would inherit it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
