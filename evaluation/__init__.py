"""Benchmarks, coding tasks and the sandbox that runs model-written code."""
