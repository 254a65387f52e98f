"""What every pytest run shares: one temporary object cache.

The variable is set when pytest imports this file, before any test module
imports recir, so nothing a test compiles (nor any subprocess it starts) goes
to the user's ~/.cache/recir, and a model compiled by one test file is loaded,
not compiled again, by the next. Each run starts cold, as a fresh clone does.
With pytest-xdist (`-n 2`) the workers inherit the controller's folder, so
they share it too (entries are written by rename: no half-written reads).
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker: the controller made the folder
    _RUN_CACHE = Path(os.environ["RECIR_CACHE_DIR"])
    _OWNER = False
else:
    _RUN_CACHE = Path(tempfile.mkdtemp(prefix="recir-pytest-cache-"))
    os.environ["RECIR_CACHE_DIR"] = str(_RUN_CACHE)
    _OWNER = True


def pytest_unconfigure(config):
    if _OWNER:
        shutil.rmtree(_RUN_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """The run's object cache, for tests that pass `cache_dir=` explicitly."""
    return _RUN_CACHE
