"""One thin CLI per DVC stage (`python -m pipelines.<stage>`), plus the plumbing they share (common.py, domains/)."""
