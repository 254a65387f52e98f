"""Native kernels called through ctypes: the frontier's matrix products
(`smallgemm`, `gemm`: `recir/passes/gemm_kernels.py`'s kernels, compiled by
`compiled_gemm`), NumPy's BLAS (`blas`) and one team running a list of kernel
calls (`split`, `records`). The runtime (deferred outer products) and the frontier
scheduler both call them, so they sit below both."""
