"""The tracing frontend: write a recursive model in Python, get IR."""

from recir.frontend.api import SubGraph, TracedModel, cond, matrix, structure, trace, vector
from recir.frontend.ops import (
    argmax,
    bilinear,
    concat,
    constant,
    exp,
    fill,
    gather,
    log,
    matmul,
    matvec,
    max,
    relu,
    sigmoid,
    size,
    slice,
    softmax,
    softmax_xent,
    sum,
    tanh,
    zeros,
)
from recir.frontend.tracer import Tracer

__all__ = [
    "SubGraph", "TracedModel", "Tracer", "argmax", "bilinear", "concat", "cond",
    "constant", "exp", "fill", "gather", "log", "matmul", "matrix", "matvec", "max",
    "relu", "sigmoid", "size", "slice", "softmax", "softmax_xent", "structure", "sum",
    "tanh", "trace", "vector", "zeros",
]
