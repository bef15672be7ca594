# The two commands: `make reproduce` (set up, then run the whole DVC pipeline) and `make test`.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup reproduce test smoke learn bench bench-rollout bench-gpu estimate exps compare gpu-check fig3 fig4 fig5

setup:
	bash scripts/setup.sh

reproduce: setup
	dvc repro

test: setup
	ruff check .
	python -m pytest -n 2 --dist loadfile --no-loadscope-reorder

smoke: setup
	dvc exp run -S profile=smoke

# The learning race (pipelines/learn/dvc.yaml, which `dvc repro` alone does not run): every trained method on the same
# held-in coding tasks, measured on them as it trains, with two controls (update off; GRPO's advantages negated).
# Each stage resumes; a killed run loses at most its last measurement interval.
learn: setup
	dvc repro pipelines/learn/dvc.yaml

# The CPU's fast paths side by side (scripts/bench_cpu.py: GEMM paths, the update on each, AdamW, sampling batches;
# reports/perf/cpu.json); the rollout engines against each other (scripts/bench_rollout.py; reports/perf/rollout.json).
bench: setup
	python scripts/bench_cpu.py

bench-rollout: setup
	python scripts/bench_rollout.py

# The predicted wall time of every stage of `dvc repro` from the benchmarks in reports/perf/ (scripts/estimate.py),
# e.g. `make estimate PROFILE=paper GPUS=8 GPU=h200 ARGS="--mean-tokens 4000 --eval-mean-tokens 600"`.
PROFILE ?= cpu
GPUS ?= 1
GPU ?= cpu
estimate: setup
	python scripts/estimate.py --profile $(PROFILE) --gpus $(GPUS) --gpu $(GPU) $(ARGS)

# On one GPU (sized for under 5 min): rollout engines against the bandwidth bound, update steps in tokens/s and MFU, peak memory at
# the paper's length (scripts/bench_gpu.py; writes reports/perf/gpu.json).
bench-gpu: setup
	python scripts/bench_gpu.py $(ARGS)

# Compare in a terminal, one column per run and a line per param and metric that differs (scripts/compare.py):
# `make exps` the DVC experiments of this commit, each profile's against its own baseline (it first names the ones
# DVC named at random after their overrides); `make compare` the pipeline invocations logged to MLflow.
# ARGS narrows either, e.g. ARGS="--stage train_lopd --metrics beta".
exps: setup
	python scripts/compare.py --dvc $(ARGS)

compare: setup
	python scripts/compare.py $(ARGS)

# On a machine with CUDA GPUs: device placement, the vLLM backend, the smoke DAG on CUDA, and a multi-GPU agreement
# check (scripts/gpu_check.py; writes reports/perf/gpu_check.json). Needs the GPU packages: requirements-gpu.txt.
gpu-check: setup
	python scripts/gpu_check.py

# The paper's analysis figures (reports/figures/): each runs the DVC experiments of its sweep without a current run
# (one on an earlier commit counts while what it ran is unchanged), one after another, and draws from `dvc exp
# show`; `python scripts/sweep.py draw fig3` draws what has run. `make fig3 SWEEP_FLAGS=--drop-checkpoints` removes
# each point's trained student from the cache (small disks).
fig3 fig5: setup
	python scripts/sweep.py run $@ $(SWEEP_FLAGS)

fig4: setup
	dvc repro report
