"""Native kernels called through ctypes: few-row products (`smallgemm`,
`gemm`), NumPy's BLAS (`blas`) and one team running a list of kernel calls
(`split`, `records`). The runtime (deferred outer products) and the frontier
scheduler both call them, so they sit below both."""
