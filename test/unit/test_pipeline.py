"""pipeline.py's pass lists are `recir-opt -p` strings: each parses against
recir-opt's passes, and recir-opt running one on a model's IR prints the IR
that the Python entry point lowers."""

from __future__ import annotations

import contextlib
import re
import io
from pathlib import Path

import numpy as np
import pytest
from xdsl.passes import PassPipeline
from xdsl.utils.arg_spec import parse_pipeline

from recir import pipeline
from recir.context import make_context
from recir.frontend import TracedModel
from recir.gradients import GradFunction
from recir.models import tree_rnn
from recir.parsing import parse_module
from recir.tools.recir_opt import RecirOptMain, main

NAMED = {"INFERENCE": pipeline.INFERENCE, "GRADIENT": pipeline.GRADIENT,
         "DATAFLOW": pipeline.DATAFLOW,
         "unfused": pipeline.passes_for(fuse=False),
         "tasks": pipeline.passes_for(threads=4),
         "gradient of @f": pipeline.gradient_passes("f", 0),
         "FRONTIER": pipeline.FRONTIER.format(inputs=5),
         "FRONTIER_GRADIENT": pipeline.FRONTIER_GRADIENT.format("f__post"),
         "FRONTIER_LOWER": pipeline.FRONTIER_LOWER}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_each_list_parses_against_recir_opts_passes(name: str) -> None:
    spec = NAMED[name]
    passes = PassPipeline.parse_spec(RecirOptMain(args=[]).available_passes, spec).passes
    assert [p.name for p in passes] == [p.name for p in parse_pipeline(spec)]
    assert len(passes) == spec.count(",") + 1


def test_task_lists_differ_only_by_the_task_passes() -> None:
    assert pipeline.passes_for(fuse=False) == pipeline.INFERENCE.replace(
        "tmath-fuse-elementwise,", "")
    names = [p.name for p in parse_pipeline(pipeline.passes_for(threads=2))]
    assert names == ["capture-outer-refs", "tmath-fuse-elementwise", "invoke-mark-concurrent",
                     "invoke-clone-serial", "convert-tmath-to-loops", "convert-scf-to-cf",
                     "convert-invoke-to-gomp", "convert-recir-to-llvm"]


def recir_opt(passes: str, path: Path) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["-p", passes, str(path)]) == 0, err.getvalue()
    return out.getvalue()


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> tuple[TracedModel, Path]:
    """A TreeRNN's IR in a file and the model read back from it (so both
    sides see the same op locations, which the error sites name)."""
    params = tree_rnn.init_params(np.random.default_rng(1), hidden=4, vocab=10)
    traced = tree_rnn.trace_model(params)
    path = tmp_path_factory.mktemp("ir") / "tree_rnn.mlir"
    path.write_text(str(traced.module))
    module = parse_module(make_context(), path.read_text(), str(path))
    return TracedModel(module, traced.entry, traced.input_names, traced.params), path


@pytest.mark.parametrize("threads", [1, 2])
def test_recir_opt_prints_what_compile_lowers(model_file, threads: int) -> None:
    model, path = model_file
    lowered = pipeline.lower(model.module, threads=threads)
    printed = recir_opt(pipeline.passes_for(threads=threads), path)
    assert printed.strip() == str(lowered).strip()
    assert "llvm.func" in printed and " = tmath." not in printed  # lowered all the way


def test_recir_opt_prints_what_value_and_grad_lowers(model_file) -> None:
    model, path = model_file
    grad = GradFunction(model, engine="interpret")
    lowered = pipeline.lower(grad.module)  # what its native engine compiles
    passes = f"{pipeline.gradient_passes(model.entry, -1)},{pipeline.INFERENCE}"
    printed = recir_opt(passes, path)
    assert printed.strip() == str(lowered).strip()
    assert f"@{model.entry}_grad" in printed


def test_recir_opt_runs_the_frontier_lists(model_file) -> None:
    """The batched form, fused and lowered by recir-opt as `batching="frontier"`
    lowers it: a fused loop over rows may share a uniform input (a bias)."""
    model, path = model_file
    batched = pipeline.FRONTIER.format(inputs=len(model.input_names))
    fused = recir_opt(f"{batched},tmath-fuse-elementwise", path)
    assert re.search(r"tmath.fused\(.*\) : \(.*tensor<\?x4xf32>.*tensor<4xf32>", fused)
    # (the batched functions are private, so only what the entry reaches stays)
    lowered = recir_opt(f"{batched},{pipeline.FRONTIER_LOWER}", path)
    assert f"llvm.func @{model.entry}(" in lowered and " = tmath." not in lowered


def test_no_entry_point_assembles_its_own_passes() -> None:
    """Pass objects are made only from pipeline.py's lists (`run_passes`)."""
    root = Path(pipeline.__file__).parent
    made = re.compile(r"\b\w+Pass\([^)]*\)\.apply\(|\bConvertScfToCf\(")
    hits = [f"{p.relative_to(root)}:{n}" for p in sorted(root.rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if made.search(line)]
    assert not hits, f"passes applied outside pipeline.run_passes: {hits}"
