"""Native kernels called through ctypes: matrix products (`gemm`:
`recir/passes/gemm_kernels.py`'s kernels, compiled by
`compiled_gemm`; their team forms, `gemm.team_kernel`) for the runtime's
deferred outer products and the benchmarks, and NumPy's BLAS (`blas`)."""
