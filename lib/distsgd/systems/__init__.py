"""The systems side: layer profiles, the timeline simulator, the what-if and the benchmarks."""
