"""What the benchmarks share: real Placement servers to run against (not a benchmark itself)."""
