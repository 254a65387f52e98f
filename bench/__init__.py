"""Benchmarks: `python bench/run.py SUBCOMMAND` (see bench/README.md)."""
