/* fib as in examples/ir/fib.mlir: 1 for n <= 1 (so fib(30) = 1346269). */
int fib(int n) { return n <= 1 ? 1 : fib(n - 1) + fib(n - 2); }
