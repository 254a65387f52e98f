"""lit configuration: FileCheck tests for dialects, passes, examples and the frontend."""

import os
import sys
import tempfile

import lit.formats

config.name = "recir"  # noqa: F821
config.test_format = lit.formats.ShTest()  # noqa: F821
config.suffixes = [".mlir", ".py"]  # noqa: F821
config.excludes = ["recir", "unit", "integration", "__pycache__", "Inputs", "lit.cfg.py",
                   "conftest.py"]  # noqa: F821
config.test_source_root = os.path.dirname(__file__)  # noqa: F821

bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")  # noqa: F821
# lit passes on no variable it is not told to: without this, a checkout named
# in PYTHONPATH (a git worktree) ran the tests against the installed recir.
if "PYTHONPATH" in os.environ:
    config.environment["PYTHONPATH"] = os.environ["PYTHONPATH"]  # noqa: F821
# Compiled objects go to a throwaway cache, not the user's ~/.cache/recir.
config.environment["RECIR_CACHE_DIR"] = os.path.join(  # noqa: F821
    tempfile.gettempdir(), "recir-lit-cache"
)
config.substitutions.append(("%python", sys.executable))  # noqa: F821
config.substitutions.append(  # noqa: F821
    ("%examples", os.path.join(os.path.dirname(__file__), "examples", "ir"))
)
config.substitutions.append(  # noqa: F821
    (
        "RECIR_ROUNDTRIP",
        "recir-opt %s --print-op-generic --split-input-file"
        " | recir-opt --split-input-file | filecheck %s",
    )
)
