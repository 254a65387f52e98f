"""The import layers and the no-cycle rule of pyproject.toml's
[tool.importlinter] contracts: a module imports only from layers below its
own, and no sibling packages or modules import each other in a circle."""

import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def test_import_contracts_are_kept() -> None:
    # the report (which import broke which contract) is in the captured output
    assert lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True) == 0


def test_every_package_and_module_of_recir_has_a_layer() -> None:
    """A new top-level module outside every layer would go unchecked."""
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    placed = {name.strip() for layer in layers for name in layer.split("|")}
    children = {f"recir.{p.stem}" for p in (ROOT / "recir").iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert children - placed == set(), "give these a layer in pyproject.toml"
    assert placed - children == set(), "layers name modules that do not exist"
