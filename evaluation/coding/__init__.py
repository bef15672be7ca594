"""Coding tasks (TACO format) and their test-based reward."""
