"""lopd-suite's method code, laid out as the paper is.

- `lopd.core`: the shared on-policy machinery every method runs on (config, method registry, the loop, rollout
  backends and the multi-turn driver, trajectories, losses, models, checkpoints, tracking).
- `lopd.latent`: LOPD's own parts (experience bank, retriever, latent composer, cold start, the LOPD method).
- The baselines and what only they use live in the top-level `baselines` package.
"""

import os

# Nothing downloads from a model hub at run time: a Hugging Face id (model.name, bank.embedder) loads from the local
# Hugging Face cache only, and fails at once if it is not there (not after a minute of retries).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
