# The two commands: `make reproduce` (set up, then run the whole DVC pipeline) and `make test`. `make help` lists every
# target (the `##` text on its line) and the tools in scripts/.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)
.DEFAULT_GOAL := help

.PHONY: help setup reproduce test smoke learn learn-tool check-harness bench bench-rollout bench-gpu estimate exps \
	compare gpu-check fig3 fig4 fig5

help: ## this list
	@echo "Targets:"
	@awk -F':.*## ' '/^[a-z][a-z0-9 -]*:.*## /{printf "  make %-15s  %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))
	@echo "Tools in scripts/ (python scripts/NAME --help):"
	@echo "  estimate.py           predicted wall time of each stage from reports/perf/; --check against a recorded run"
	@echo "  compare.py            runs side by side: MLflow invocations (make compare) or DVC experiments (make exps)"
	@echo "  sweep.py              the paper's analysis figures from DVC experiments (make fig3, make fig5)"
	@echo "  learn_sweep.py        a tuning sweep of one setting of one learning-race run, then its table"
	@echo "  wall_time.py          a recorded run's wall time per stage, from MLflow (reports/perf/default_run_wall_time*)"
	@echo "  paired_validation.py  two training runs' validation rewards compared task by task"
	@echo "  envscaler_tier_probe.py  the base model on one envscaler-mini tier -> reports/probes/ (docs/agentic.md)"
	@echo "  gpu_check.py          make gpu-check; ddp_check.py and vllm_ranks_check.py are its torchrun workers"
	@echo "  setup.sh              make setup: .venv with the pinned packages"
	@echo "  bench/                benchmarks and one-off measurements -> reports/perf/ (docs/performance.md)"

setup: ## create .venv with the pinned packages (every target runs it first)
	bash scripts/setup.sh

reproduce: setup ## the whole DVC pipeline, the paper's tables (cpu profile: about 5 h on 2 cores)
	dvc repro

test: setup ## ruff and the test suite
	ruff check .
	python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=15

smoke: setup ## the whole DAG on the smoke profile, as a DVC experiment (minutes)
	dvc exp run -S profile=smoke

# The learning races (pipelines/learn/dvc.yaml, which `dvc repro` alone does not run): every trained method on the same
# held-in tasks, measured on them as it trains, with two controls (update off; GRPO's advantages negated); `make learn`
# runs both races (coding tasks; tool-use episodes), `make learn-tool` the tool-use race alone. Each stage resumes; a
# killed run loses at most its last measurement interval.
learn: setup ## both learning races, code and tool use (pipelines/learn/dvc.yaml)
	dvc repro pipelines/learn/dvc.yaml

learn-tool: setup ## the tool-use learning race alone (learn_tool_select, learn_tool@<run>, learn_tool_report)
	dvc repro pipelines/learn/dvc.yaml:learn_tool_report

# The harness check (pipelines/check/dvc.yaml; docs/agentic.md, "The harness check"): a scripted policy writing each
# task's ground truth in the model's tool-call format, and a null one, through the driver, parser and scorers the
# model's episodes go through, on every tool-use benchmark and the code scorers (minutes; the tokenizer, no weights).
check-harness: setup ## scripted vs null policy through the scoring harness -> reports/tables/harness_check.{csv,md}
	dvc repro pipelines/check/dvc.yaml

# The CPU's fast paths side by side (scripts/bench/bench_cpu.py: GEMM paths, the update on each, AdamW, sampling
# batches; reports/perf/cpu.json); the rollout engines against each other (scripts/bench/bench_rollout.py;
# reports/perf/rollout.json). The other benchmarks: python scripts/bench/NAME.py (docs/performance.md).
bench: setup ## this CPU's update and sampling paths side by side -> reports/perf/cpu.json
	python scripts/bench/bench_cpu.py

bench-rollout: setup ## the rollout engines side by side -> reports/perf/rollout.json
	python scripts/bench/bench_rollout.py

# The predicted wall time of every stage of `dvc repro` from the benchmarks in reports/perf/ (scripts/estimate.py),
# e.g. `make estimate PROFILE=paper GPUS=8 GPU=h200 ARGS="--mean-tokens 4000 --eval-mean-tokens 600"`.
PROFILE ?= cpu
GPUS ?= 1
GPU ?= cpu
estimate: setup ## predicted wall time of every stage (PROFILE, GPUS, GPU; ARGS=--check: against a record)
	python scripts/estimate.py --profile $(PROFILE) --gpus $(GPUS) --gpu $(GPU) $(ARGS)

# On one GPU (sized for under 5 min): rollout engines against the bandwidth bound, update steps in tokens/s and MFU,
# peak memory at the paper's length (scripts/bench/bench_gpu.py; writes reports/perf/gpu.json).
bench-gpu: setup ## on one GPU: rollout engines and updates -> reports/perf/gpu.json
	python scripts/bench/bench_gpu.py $(ARGS)

# Compare in a terminal, one column per run and a line per param and metric that differs (scripts/compare.py):
# `make exps` the DVC experiments of this commit, each profile's against its own baseline (it first names the ones
# DVC named at random after their overrides); `make compare` the pipeline invocations logged to MLflow.
# ARGS narrows either, e.g. ARGS="--stage train_lopd --metrics beta".
exps: setup ## this commit's DVC experiments side by side
	python scripts/compare.py --dvc $(ARGS)

compare: setup ## the pipeline runs logged to MLflow side by side
	python scripts/compare.py $(ARGS)

# On a machine with CUDA GPUs: device placement, the vLLM backend, the smoke DAG on CUDA, and a multi-GPU agreement
# check (scripts/gpu_check.py; writes reports/perf/gpu_check.json). Needs the GPU packages: requirements-gpu.txt.
gpu-check: setup ## on CUDA GPUs: placement, vLLM, the smoke DAG, multi-GPU agreement
	python scripts/gpu_check.py

# The paper's analysis figures (reports/figures/): each runs the DVC experiments of its sweep without a current run
# (one on an earlier commit counts while what it ran is unchanged), one after another, and draws from `dvc exp
# show`; `python scripts/sweep.py draw fig3` draws what has run. `make fig3 SWEEP_FLAGS=--drop-checkpoints` removes
# each point's trained student from the cache (small disks).
fig3 fig5: setup ## the paper's sweep figures from DVC experiments (reports/figures/)
	python scripts/sweep.py run $@ $(SWEEP_FLAGS)

fig4: setup ## the paper's Figure 4 (dvc repro report)
	dvc repro report
