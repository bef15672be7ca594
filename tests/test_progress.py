"""Progress bars: drawn on a terminal, quiet under CI, in logs (non-TTY) and on other ranks; a real rollout call
draws sequences done with their rate and tokens/s."""

from __future__ import annotations

import functools
import sys

import pytest

from lopd.core import progress as progress_module
from lopd.core.progress import enabled, progress, write
from lopd.core.sampling import HFBackend, SamplingParams


@pytest.fixture
def watched(monkeypatch):
    """No CI, the first process of its machine."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


def on_a_terminal(monkeypatch, tty: bool = True) -> None:
    """Make the current stderr (capsys's; called in the test body, as pytest installs the test's own capture after
    the fixtures are set up) say whether it is a terminal."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)


def test_drawn_on_a_terminal(watched, monkeypatch, capsys):
    on_a_terminal(monkeypatch)
    assert enabled()
    with progress(total=3, desc="work", unit="task") as bar:
        bar.update(3)
    drawn = capsys.readouterr().err
    assert "work: 100%" in drawn and "3/3" in drawn and "task/s" in drawn


@pytest.mark.parametrize("env", [{"CI": "true"}, {"CI": "1"}, {"LOCAL_RANK": "1"}])
def test_quiet_under_ci_and_on_other_ranks(watched, monkeypatch, capsys, env):
    on_a_terminal(monkeypatch)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert not enabled()
    with progress(total=3, desc="work") as bar:
        bar.update(3)
    assert bar.disable and capsys.readouterr().err == ""


def test_ci_false_is_not_ci(watched, monkeypatch):
    on_a_terminal(monkeypatch)
    monkeypatch.setenv("CI", "false")
    assert enabled()


def test_quiet_when_stderr_is_not_a_terminal(watched, monkeypatch, capsys):
    on_a_terminal(monkeypatch, tty=False)  # e.g. `dvc repro > log`
    assert not enabled()
    assert list(progress(range(3), desc="work")) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_transient_bar_waits_then_is_erased(watched, monkeypatch, capsys):
    on_a_terminal(monkeypatch)
    with progress(total=2, desc="quick", transient=True) as bar:  # over long before TRANSIENT_DELAY_S
        bar.update(2)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress_module, "TRANSIENT_DELAY_S", 0.0)
    with progress(total=2, desc="slow", transient=True) as bar:
        bar.update(2)
    drawn = capsys.readouterr().err
    assert "slow" in drawn and drawn.endswith("\r")  # drawn, then cleared on close


def test_vllm_bar_calls_fit_the_helper(watched, monkeypatch):
    """vLLM 0.32 builds its bars as `use_tqdm(total=..., desc=..., dynamic_ncols=True, postfix=...)` and
    `use_tqdm(iterable, desc=...)`; VLLMBackend passes this partial of the helper as `use_tqdm`."""
    on_a_terminal(monkeypatch)
    make = functools.partial(progress, unit="seq", transient=True)
    with make(total=2, desc="Processed prompts", dynamic_ncols=True, postfix="est. speed") as bar:
        bar.update(2)
    assert list(make([1, 2], desc="Rendering prompts")) == [1, 2]


def test_write_prints_a_log_line(watched, monkeypatch, capsys):
    on_a_terminal(monkeypatch)
    with progress(total=2, desc="work"):
        write("[stage] step 1/2")
    assert capsys.readouterr().out == "[stage] step 1/2\n"


def test_rollout_call_draws_sequences_and_token_rate(watched, monkeypatch, capsys, tiny_model, tokenizer):
    on_a_terminal(monkeypatch)
    monkeypatch.setattr(progress_module, "TRANSIENT_DELAY_S", 0.0)
    monkeypatch.setattr(progress_module, "MIN_INTERVAL_S", 0.0)  # draw every update of this short call
    backend = HFBackend(tiny_model, stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id, batch_size=2)
    prompts = [tokenizer(text)["input_ids"] for text in ("def f(x):", "Hello there, how", "1 2 3")]
    backend.generate(prompts, SamplingParams(max_new_tokens=6), seed=0)
    drawn = capsys.readouterr().err
    assert "sample" in drawn and "3/3" in drawn
    assert "seq/s" in drawn and "tok/s" in drawn
