"""`checkpoint.finish` memory benchmark -> reports/perf/checkpoint_finish.json.

A finished run drops the AdamW moments from its last trainer state (lopd/core/checkpoint.py). Read whole, those
moments (5 GB for the 0.5B model) sat beside the live run and had the kernel kill SDPO's and SDFT's cpu-profile
runs there; `finish` reads the file memory-mapped instead. This writes a trainer state with `--gb` GB of moments in
one fresh process and finishes it in another, once as `finish` does (mmap) and once reading it whole (plain), and
records each one's peak RSS (separate processes: a child's ru_maxrss can carry its parent's).
Run: python scripts/bench/bench_checkpoint_finish.py [--gb 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "reports" / "perf" / "checkpoint_finish.json"
WRITE_STATE = """
import sys, torch
from pathlib import Path
from lopd.core import checkpoint
out, gb = Path(sys.argv[1]), float(sys.argv[2])
step = out / checkpoint.step_name(1)
step.mkdir()
n = int(gb * 2**30 / 8)  # two float32 moments
torch.save({"step": 1, "optimizer": {"state": {0: {"exp_avg": torch.ones(n), "exp_avg_sq": torch.ones(n)}}},
            "history": [], "files": {}}, step / checkpoint.TRAINER_STATE)
checkpoint.write_manifest(out, "grpo", 1, weights=f"{step.name}/{checkpoint.MODEL}")
"""
FINISH = """
import resource, sys, torch
if sys.argv[2] == "plain":  # what finish did before: the whole file into memory
    load = torch.load
    torch.load = lambda *a, **kw: load(*a, **{**kw, "mmap": False})
from lopd.core import checkpoint
checkpoint.finish(sys.argv[1])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
"""


def peak_rss_gib(gb: float, mode: str) -> float:
    out = Path(tempfile.mkdtemp(prefix="bench-finish-"))
    try:
        subprocess.run([sys.executable, "-c", WRITE_STATE, str(out), str(gb)], check=True, cwd=REPO)
        done = subprocess.run([sys.executable, "-c", FINISH, str(out), mode], check=True, cwd=REPO,
                              capture_output=True, text=True)
        return round(float(done.stdout.strip().splitlines()[-1]), 3)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="GB of AdamW moments in the trainer state")
    args = parser.parse_args()
    result = {"moments_gb": args.gb, "peak_rss_gib": {mode: peak_rss_gib(args.gb, mode) for mode in ("mmap", "plain")},
              "note": "peak RSS of a fresh process running checkpoint.finish; mmap is what it does"}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
