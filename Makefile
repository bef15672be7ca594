# The two commands: `make reproduce` (set up, then run the whole DVC pipeline) and `make test`.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup reproduce test smoke bench

setup:
	bash scripts/setup.sh

reproduce: setup
	dvc repro

test: setup
	python -m pytest -n 2

smoke: setup
	dvc exp run -S profile=smoke

bench: setup
	python scripts/bench_rollout.py
