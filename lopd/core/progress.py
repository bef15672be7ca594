"""Progress bars for long work (sampling, training steps, evaluation, bank building): one rule and one look.

A bar draws on stderr only when someone watches it: stderr is a terminal, `CI` is unset (or false), and this is the
first process of its machine. Under `dvc repro` with its output going to a file, in CI logs and on the other ranks
of a multi-process run every bar is quiet: a bar redraws itself with carriage returns, which a log file keeps as one
ever-growing line, and ranks sharing a terminal would overwrite each other's bars. Logs keep the stages' own one-line
prints instead; print those with `write` while a bar is live.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable

from tqdm import tqdm

MIN_INTERVAL_S = 1.0
"""Redraw at most once a second: often enough to read, never a cost to the work."""
SMOOTHING = 0.05
"""Weight of the latest rate in the rate's moving average: low, so the ETA follows the average rate instead of
jumping with one slow item (a long rollout, a test that times out)."""
TRANSIENT_DELAY_S = 5.0
"""A transient bar draws only once its call has run this long (see `progress`)."""


def enabled() -> bool:
    """Whether bars draw: stderr is a terminal, CI is not set, and this is the first process of its machine."""
    ci = os.environ.get("CI", "").lower() not in ("", "0", "false")
    first = os.environ.get("LOCAL_RANK", "0") == "0"  # set by torchrun and `accelerate launch`
    return sys.stderr.isatty() and not ci and first


def progress(iterable: Iterable | None = None, *, desc: str, total: int | None = None, unit: str = "it",
             transient: bool = False, **options: Any) -> tqdm:
    """A tqdm bar on stderr over `iterable` (closed when the loop ends), or up to `total` by `update` calls (close
    it: `with progress(...) as bar`). It shows done/total, the rate in `unit`/s, elapsed and ETA; `options` are
    tqdm's and override the look.

    `transient=True` is for a call made many times inside a longer loop (one `generate`, one batch of episodes):
    its bar draws only once the call has run `TRANSIENT_DELAY_S` (calls that end in a blink never flicker) and is
    erased when done, leaving the enclosing bar and the log lines.
    """
    look = {"dynamic_ncols": True, "mininterval": MIN_INTERVAL_S, "smoothing": SMOOTHING,
            # check the clock on every update: items here are slow, and tqdm's adaptive default would skip the
            # redraws of `update(0)` calls that only keep the elapsed time and the postfix fresh
            "miniters": 0}
    if transient:
        look.update(leave=False, delay=TRANSIENT_DELAY_S)
    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, disable=not enabled(),
                **{**look, **options})


def quiet_libraries() -> None:
    """Give the libraries' own bars (transformers' weight loading and saving) the same rule as ours."""
    if not enabled():
        from transformers.utils import logging

        logging.disable_progress_bar()


def write(line: str) -> None:
    """Print a log line to stdout (flushed: DVC and CI logs read it as it comes) above the live bars, which would
    otherwise run into it on a terminal."""
    with tqdm.external_write_mode():
        print(line, flush=True)
