"""Native kernels called through ctypes: the frontier's matrix products
(`smallgemm`, `gemm`: `recir/passes/gemm_kernels.py`'s kernels, compiled by
`compiled_gemm`; their team forms, `gemm.team_kernel`) and NumPy's BLAS
(`blas`). The runtime (deferred outer products) and the frontier
scheduler both call them, so they sit below both."""
