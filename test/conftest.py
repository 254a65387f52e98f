"""What every pytest run shares: one temporary object cache.

The variable is set when pytest imports this file, before any test module
imports recir, so nothing a test compiles (nor any subprocess it starts) goes
to the user's ~/.cache/recir, and a model compiled by one test file is loaded,
not compiled again, by the next. Each run starts cold, as a fresh clone does.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_RUN_CACHE = Path(tempfile.mkdtemp(prefix="recir-pytest-cache-"))
os.environ["RECIR_CACHE_DIR"] = str(_RUN_CACHE)


def pytest_unconfigure(config):
    shutil.rmtree(_RUN_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """The run's object cache, for tests that pass `cache_dir=` explicitly."""
    return _RUN_CACHE
