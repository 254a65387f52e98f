"""Frontier batching (TensorFlow Fold / Cavs), derived from the recursive function.

`segments.py` splits the closed recursive function at its invokes,
`schedule.py` expands the call tree of a batch and groups invocations into
frontiers (top down by depth, bottom up by height), `execute.py` and
`kernels.py` run a segment once per frontier on arrays with a leading
frontier axis (`native.py`: each group of row-wise ops as one compiled loop
over the frontier's rows), `grad.py` runs the backward over the same frontiers in
reverse, and `api.py` wraps it as callables.
"""
