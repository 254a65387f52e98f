"""The xDSL context recir parses and rewrites in: upstream dialects we use plus ours."""

from xdsl.context import Context
from xdsl.dialects import arith, builtin, cf, func, llvm, scf

from recir.dialects.adjoint import Adjoint
from recir.dialects.dataflow import Dataflow
from recir.dialects.frontier import Frontier
from recir.dialects.invoke import Invoke
from recir.dialects.tape import Tape
from recir.dialects.tmath import TMath


def make_context() -> Context:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, scf.Scf, cf.Cf, llvm.LLVM,
                    Invoke, TMath, Tape, Adjoint, Dataflow, Frontier):
        ctx.load_dialect(dialect)
    return ctx
