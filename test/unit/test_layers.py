"""The import layers and the no-cycle rule of pyproject.toml's
[tool.importlinter] contracts: a module imports only from layers below its
own, and no sibling packages or modules import each other in a circle."""

from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    # the report (which import broke which contract) is in the captured output
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                        no_logo=True) == 0
