"""The harness check: tells "the model scores 0" from "the harness scores 0" (`make check-harness`, stage
`check_harness` of pipelines/check/dvc.yaml; docs/agentic.md, "The harness check").

Two policies play every task of every tool-use benchmark through the path a model's episodes take: the multi-turn
driver (`lopd.core.multiturn.run_episodes`), its tool-call parser (`parse_step`, in `agentic.tool_call_format`) and
each benchmark's scorer (`ToolEnvironment.score`), on the environments that evaluation (`load_benchmark`) and training
(`envscaler_split.training_tasks`) build, under the config's step caps and token budgets:
- the scripted policy (`ScriptedPolicy`) writes the task's ground-truth calls, one a step, as the tokens the model's
  chat template writes for an assistant tool call (`ScriptWriter`), and closes each user turn with "Task Completed",
  the reply the system prompt asks for (BFCL then opens its next user turn; EnvScaler and ACEBench end);
- the null policy replies "Task Completed" at every step.

Where the scripted policy scores below 1.0, `shortfall` says why, task by task: the ground truth itself fails when
executed straight into the environment (`replay`: no driver, parser or tokenizer), or the script does not fit a cap
(more steps than the step cap, a step longer than the step budget, a context past its limit), which the same script
played under caps that fit it (`fitting`) confirms; anything else is a fault of the harness. The code sandbox is
checked alike: a task's reference solution against an empty answer, each scored by its benchmark's own scorer.
"""

from __future__ import annotations

import csv
import io
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Sequence, Union

from lopd.core.multiturn import TASK_COMPLETED, ToolCall, ToolEnvironment, end_of_turn_id, run_episodes
from lopd.core.sampling import Completion, SamplingParams
from lopd.core.trajectory import Trajectory

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from evaluation.agentic.acebench import ACETask
    from evaluation.agentic.benchmarks import Benchmark
    from evaluation.agentic.bfcl import BFCLEntry
    from evaluation.coding.taco import CodingTask

Step = Union[ToolCall, str]
"""One step of a script: a tool call, or a reply (text without a call)."""

CSV_COLUMNS = ("benchmark", "n", "scripted", "null")
NO_CONTEXT_LIMIT = 2**31
"""The context limit of a play under caps that fit its script: none a script reaches."""


# --------------------------------------------------------------------------- scripts


def envscaler_script(ground_truth: Sequence[dict[str, Any]]) -> list[Step]:
    """An EnvScaler task's ground-truth calls (`[{"name", "arguments"}, ...]`), then the reply that ends it."""
    return [*(ToolCall(call["name"], dict(call["arguments"])) for call in ground_truth), TASK_COMPLETED]


def bfcl_script(entry: BFCLEntry) -> list[Step]:
    """Per question turn, its ground-truth calls, then the reply that closes the turn (BFCL opens the next turn on a
    step without a call); a turn past the ground truth's last has no calls, as in `bfcl.replay_ground_truth`."""
    script: list[Step] = []
    for turn in range(len(entry.question)):
        calls = entry.ground_truth[turn] if turn < len(entry.ground_truth) else []
        script += [ToolCall(name, dict(arguments)) for name, arguments in calls]
        script.append(TASK_COMPLETED)
    return script


def acebench_script(task: ACETask, path: int) -> list[Step]:
    """The calls of milestone path `path` in order (a group's calls as listed), then the reply that ends the task."""
    return [*(call for group in task.milestones[path] for call in group), TASK_COMPLETED]


def reproducing_path(task: ACETask) -> int:
    """The first milestone path that, replayed straight into the environment, reaches the published final state; 0
    when none does (the published data contradict themselves there: evaluation/agentic/acebench/__init__.py)."""
    from evaluation.agentic.acebench import replay_ground_truth

    for path in range(len(task.milestones)):
        state = replay_ground_truth(task, path)
        if all(state.get(name) == expected for name, expected in task.ground_truth.items()):
            return path
    return 0


def script_of(benchmark: str, env: Any) -> list[Step] | None:
    """The scripted policy's steps for the task `env` plays (its environment holds its ground truth); None when the
    task has none (official EnvScaler files carry no ground truth)."""
    if benchmark.startswith("envscaler"):
        return None if env.task.ground_truth is None else envscaler_script(env.task.ground_truth)
    if benchmark.startswith("bfcl_"):
        return bfcl_script(env.entry)
    if benchmark.startswith("acebench_"):
        return acebench_script(env.task, reproducing_path(env.task))
    raise ValueError(f"no ground truth known for benchmark {benchmark!r}")


# --------------------------------------------------------------------------- the policies


class TemplateError(ValueError):
    """The chat template cannot write what the scripted policy must write."""


_CONTEXT = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
_PROBE = ToolCall("lopd_probe_tool", {"lopd_probe_argument": 7})


def assistant_turn(tokenizer: PreTrainedTokenizerBase, message: dict[str, Any], end_of_turn: int, model: str) -> str:
    """What the chat template writes for the assistant `message` after its generation prompt, through its end-of-turn
    token: the text a model sampled when it wrote `message`."""
    prompt = tokenizer.apply_chat_template(_CONTEXT, add_generation_prompt=True, tokenize=False)
    whole = tokenizer.apply_chat_template([*_CONTEXT, message], tokenize=False)
    end = tokenizer.added_tokens_decoder[end_of_turn].content
    turn = whole[len(prompt):] if whole.startswith(prompt) else ""
    if end not in turn:
        raise TemplateError(f"model {model}: its chat template does not write an assistant turn after its generation "
                            f"prompt, closed by {end!r}")
    return turn[:turn.index(end) + len(end)]


class ScriptWriter:
    """Steps as the tokens the model's chat template writes for them: a call as an assistant message with `tool_calls`
    (one call), a reply as one with that content, each through the template's end-of-turn token. A template that does
    not write a tool call stops it (`TemplateError`): the check never invents a format the model was not given."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, model: str) -> None:
        self.tokenizer, self.model = tokenizer, model
        self.end_of_turn = end_of_turn_id(tokenizer)
        probe = self.text(_PROBE)
        if _PROBE.name not in probe or next(iter(_PROBE.arguments)) not in probe:
            raise TemplateError(f"model {model}: its chat template does not write an assistant tool call (a message's "
                                "tool_calls), so the scripted policy has no tool-call format of the model's to write")
        self.reply = self.ids(TASK_COMPLETED)

    def text(self, step: Step) -> str:
        if isinstance(step, str):
            message = {"role": "assistant", "content": step}
        else:
            call = {"type": "function", "function": {"name": step.name, "arguments": step.arguments}}
            message = {"role": "assistant", "content": "", "tool_calls": [call]}
        return assistant_turn(self.tokenizer, message, self.end_of_turn, self.model)

    def ids(self, step: Step) -> list[int]:
        return list(self.tokenizer(self.text(step), add_special_tokens=False)["input_ids"])


class ScriptedPolicy:
    """A `RolloutBackend` that plays one episode from a script of token ids: its i-th step samples the script's i-th
    step (log-prob 0: the policy is certain) and, once the script is over, `after` (the reply: nothing is left to do).
    A step longer than the step budget is cut there, as a model's would be (not `stopped`). The null policy is the
    empty script."""

    def __init__(self, steps: Sequence[Sequence[int]], after: Sequence[int]) -> None:
        self.steps, self.after, self.played = [list(step) for step in steps], list(after), 0
        self.stats = {"sampling_s": 0.0, "prompt_tokens": 0, "sampled_tokens": 0}

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int,
                 embeds: Any = None) -> list[Completion]:
        if len(prompts) != 1:
            raise ValueError(f"a scripted policy plays one episode at a time, not {len(prompts)}")
        step = self.steps[self.played] if self.played < len(self.steps) else self.after
        self.played += 1
        kept = step[:params.max_new_tokens]
        self.stats["prompt_tokens"] += len(prompts[0])
        self.stats["sampled_tokens"] += len(kept)
        return [Completion(kept, [0.0] * len(kept), stopped=len(kept) == len(step))]


# --------------------------------------------------------------------------- plays


@dataclass(frozen=True)
class Caps:
    """What an episode may use: policy steps, tokens per step, context tokens."""

    max_steps: int
    max_step_tokens: int
    max_context_tokens: int

    def __str__(self) -> str:
        return f"{self.max_steps} steps, {self.max_step_tokens} tokens a step, {self.max_context_tokens} in context"


def fitting(step_tokens: Sequence[int]) -> Caps:
    """Caps a script of steps of these lengths fits: a step each, its longest step, no context limit."""
    return Caps(len(step_tokens), max(step_tokens), NO_CONTEXT_LIMIT)


@dataclass(frozen=True)
class Played:
    """One episode's outcome, as far as the check reads it."""

    reward: float
    ended: str = ""
    steps: int = 0
    prompt_tokens: int = 0
    tool_calls: int = 0
    invalid_calls: int = 0
    notes: str = ""
    """The scorer's notes (BFCL's invalid_reason), an environment error, a simulated user that was needed."""


def played(trajectory: Trajectory) -> Played:
    b = trajectory.behaviour
    notes = [*(f"{key}: {value}" for key, value in b.score_notes.items()), *([b.env_error] if b.env_error else []),
             *(["the simulated user was asked"] if b.scores.get("simulator_error") else [])]
    return Played(trajectory.reward, b.ended, b.steps, len(trajectory.turns[0].context_ids), b.tool_calls,
                  b.invalid_calls, "; ".join(notes))


def play(policy: ScriptedPolicy, tokenizer: PreTrainedTokenizerBase, task_id: str, env: ToolEnvironment, caps: Caps,
         tool_call_format: str) -> Played:
    """One episode of `policy` on `env` through the driver, as evaluation plays it (`run_episodes` closes `env`)."""
    params = SamplingParams(max_new_tokens=caps.max_step_tokens)
    [trajectory] = run_episodes(policy, tokenizer, [(task_id, 0, env)], params, 0, caps.max_steps,
                                caps.max_context_tokens, tool_call_format=tool_call_format)
    return played(trajectory)


def replay(env: ToolEnvironment, script: Sequence[Step]) -> Played:
    """The script executed straight into the environment (its protocol only: no driver, parser or tokenizer), then
    scored; `env` is closed."""
    try:
        env.reset()
        for step in script:
            if isinstance(step, ToolCall):
                env.call_tool(step.name, dict(step.arguments))
            elif env.reply(step) is None:
                break
        scores = env.score()
    finally:
        env.close()
    return Played(float(scores["reward"]), notes="; ".join(f"{k}: {v}" for k, v in scores.items()
                                                             if not isinstance(v, (int, float))))


def shortfall(script: Sequence[Step], step_tokens: Sequence[int], caps: Caps, capped: Played, fitted: Played,
              direct: Played) -> tuple[str, str]:
    """Why the scripted policy scored `capped.reward` < 1 on a task, as (kind, detail): its ground truth fails when
    replayed straight into the environment (`direct`); the harness loses what replay gets (the play under caps that
    fit the script, `fitted`, scores below 1); else each cap the script does not fit (the step cap, the step budget,
    the context limit), or, when none, "unexplained" (a fault of the harness as well)."""
    calls = sum(isinstance(step, ToolCall) for step in script)
    replies = len(script) - calls
    if direct.reward < 1:
        return "ground truth fails", f"replayed straight into the environment it scores {direct.reward:.2f}" + (
            _aside(direct.notes))
    if fitted.reward < 1:
        return "harness", (f"under caps that fit the script it scores {fitted.reward:.2f}, ended {fitted.ended}; the "
                           f"parser read {fitted.tool_calls} of {calls} calls, {fitted.invalid_calls} malformed"
                           + _aside(fitted.notes))
    hit = []
    if len(script) > caps.max_steps and capped.ended == "step_cap":
        hit.append(("step cap", f"{len(script)} steps ({calls} {'call' if calls == 1 else 'calls'} + {replies} "
                                f"{'reply' if replies == 1 else 'replies'}) for a cap of {caps.max_steps}"))
    if max(step_tokens) > caps.max_step_tokens:
        hit.append(("step budget", f"a step of {max(step_tokens)} tokens for a budget of {caps.max_step_tokens}"))
    if capped.ended == "context":
        hit.append(("context", f"after {capped.steps} steps (a prompt of {capped.prompt_tokens} tokens) the context "
                               f"would pass {caps.max_context_tokens}"))
    if not hit:
        return "unexplained", f"scored {capped.reward:.2f}, ended {capped.ended}" + _aside(capped.notes)
    return " + ".join(kind for kind, _ in hit), "; ".join(detail for _, detail in hit)


def _aside(notes: str) -> str:
    return f" ({notes})" if notes else ""


# --------------------------------------------------------------------------- the checks


class PlaceholderUser:
    """ACEBench multi-turn's simulated user where none is played (the check loads no model): it opens the conversation
    with a placeholder, which neither policy reads (their steps are fixed), and refuses every later turn, which
    `ACEEnvironment` records as a simulator error: an episode that needed the user says so (`played`'s notes)."""

    OPENING = "(harness check: no simulated user is played; neither policy reads this message)"

    def __call__(self, messages: list[dict[str, str]]) -> str:
        if len(messages) > 2:  # the simulator's system prompt and the assistant's greeting open every dialogue
            raise RuntimeError("the harness check plays no simulated user")
        return self.OPENING


def check_tool_benchmark(name: str, open_benchmark: Callable[[], ContextManager[Benchmark]], writer: ScriptWriter,
                         max_step_tokens: int, max_context_tokens: int, tool_call_format: str) -> RowCheck:
    """Every task of a tool-use benchmark played four times, each time on fresh environments (`open_benchmark`): the
    scripted policy under the benchmark's caps and under caps that fit its script, the null policy under the
    benchmark's caps, and the script replayed straight into the environment."""
    start = time.perf_counter()
    scripts: dict[str, list[Step] | None] = {}
    step_ids: dict[str, list[list[int]]] = {}
    outcomes: dict[str, dict[str, Played]] = {}
    for kind in ("scripted", "fitted", "null", "direct"):
        with open_benchmark() as bench:
            caps = Caps(bench.max_steps, max_step_tokens, max_context_tokens)
            for task_id, env in bench.episodes:
                if task_id not in scripts:
                    scripts[task_id] = script_of(name, env)
                    step_ids[task_id] = [writer.ids(step) for step in scripts[task_id] or []]
                script, ids = scripts[task_id], step_ids[task_id]
                if script is None:
                    env.close()
                elif kind == "direct":
                    outcomes[task_id][kind] = replay(env, script)
                else:
                    policy = ScriptedPolicy([] if kind == "null" else ids, writer.reply)
                    outcomes.setdefault(task_id, {})[kind] = play(
                        policy, writer.tokenizer, task_id, env, fitting([len(i) for i in ids]) if kind == "fitted"
                        else caps, tool_call_format)
    tasks = []
    for task_id, out in outcomes.items():
        why = None if out["scripted"].reward >= 1 else shortfall(
            scripts[task_id], [len(i) for i in step_ids[task_id]], caps, out["scripted"], out["fitted"], out["direct"])
        tasks.append(TaskCheck(task_id, out["scripted"].reward, out["null"].reward, out["fitted"].reward,
                               out["direct"].reward, why))
    missing = sum(script is None for script in scripts.values())
    note = (f"n/a: no task has a ground truth ({bench.source})" if not tasks
            else f"{missing} task(s) without a ground truth left out" if missing else "")
    return RowCheck(name, tuple(tasks), str(caps), note, time.perf_counter() - start)


def fenced(solution: str) -> str:
    """A reference program as a model answers a coding task: in a ```python block."""
    return f"```python\n{solution}\n```"


def check_coding_tasks(name: str, tasks: Sequence[CodingTask], workers: int) -> RowCheck:
    """Each coding task's first reference solution and an empty answer, scored by the code domain's reward
    (`taco.reward`, the sandboxed tests); tasks without a reference solution are left out."""
    from evaluation.coding import taco

    start = time.perf_counter()
    solved = [task for task in tasks if task.solutions]

    def check(task: CodingTask) -> TaskCheck:
        scripted, null = taco.reward(fenced(task.solutions[0]), task), taco.reward("", task)
        if scripted >= 1:
            return TaskCheck(task.task_id, scripted, null)
        report = taco.run_tests(task.solutions[0], task, stop_at_first_failure=True)
        return TaskCheck(task.task_id, scripted, null, why=("reference fails", f"{report.status}: {report.detail}"))

    with ThreadPoolExecutor(workers) as pool:
        checked = tuple(pool.map(check, solved))
    missing = len(tasks) - len(solved)
    note = "n/a: no task has a reference solution" if not solved else (
        f"{missing} task(s) without a reference solution left out" if missing else "")
    return RowCheck(name, checked, "taco.reward: the sandboxed tests", note, time.perf_counter() - start)


def check_evalplus(benchmark: str, data_dir: str | Path, workers: int, limit: int | None) -> RowCheck:
    """Each EvalPlus task's canonical solution, written as a model's completion after EvalPlus' prefilled turn (the
    prompt's code and the canonical body, then the closing fence, kept as evaluation keeps it: `chat_solution`), and an
    empty completion, scored by evaluation's EvalPlus harness (`evalplus_bench.score`, base and plus tests)."""
    from evaluation import evalplus_bench

    start = time.perf_counter()
    try:
        problems = evalplus_bench.load_problems(benchmark, data_dir, limit=limit)
    except evalplus_bench.EvalPlusDataUnavailable as err:
        return RowCheck(benchmark, (), "", f"n/a: {err}")
    keep = evalplus_bench.chat_solution
    answers = {"scripted": {tid: [keep(p["prompt"] + p["canonical_solution"] + "\n```\n")] for tid, p in
                            problems.items()},
               "null": {tid: [keep("")] for tid in problems}}
    verdicts = {kind: evalplus_bench.score(benchmark, problems, completions, data_dir=data_dir,
                                           workers=workers)["per_task"] for kind, completions in answers.items()}
    tasks = tuple(TaskCheck(tid, float(verdicts["scripted"][tid]["plus"][0]), float(verdicts["null"][tid]["plus"][0]),
                            why=None if verdicts["scripted"][tid]["plus"][0] else
                            ("reference fails", verdicts["scripted"][tid]["status"][0])) for tid in problems)
    return RowCheck(benchmark, tasks, "evalplus_bench.score: base and plus tests", "", time.perf_counter() - start)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class TaskCheck:
    task_id: str
    scripted: float
    null: float
    fitted: float | None = None
    """Tool use: the scripted policy under caps that fit its script."""
    direct: float | None = None
    """Tool use: the ground truth replayed straight into the environment."""
    why: tuple[str, str] | None = None
    """(kind, detail) where the scripted policy scores below 1.0."""


@dataclass(frozen=True)
class RowCheck:
    benchmark: str
    tasks: tuple[TaskCheck, ...]
    setting: str
    """What was played: the caps, or the scorer."""
    note: str = ""
    """`n/a: why` for a row without tasks; else what else the reader must know (tasks left out)."""
    seconds: float = 0.0
    evaluated: int | None = None
    """How many of its first tasks evaluation plays (`agentic.task_limit`); None: all, or not an evaluation."""

    def mean(self, field: str, first: int | None = None) -> float | None:
        values = [getattr(t, field) for t in self.tasks[:first]]
        return mean(values) if values and None not in values else None


def csv_text(rows: Sequence[RowCheck]) -> str:
    """`benchmark,n,scripted,null`: each row's tasks and mean scores (n/a where no task was played)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow([row.benchmark, len(row.tasks), _number(row.mean("scripted")), _number(row.mean("null"))])
    return out.getvalue()


def _number(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


HARNESS_FAULTS = ("harness", "unexplained")
"""Shortfall kinds that neither the data nor a cap explain: the harness itself is at fault."""


def faults(row: RowCheck) -> list[str]:
    """What in `row` only a faulty harness explains: scripted shortfalls of a `HARNESS_FAULTS` kind, and null episodes
    scoring full marks (a scorer that credits doing nothing)."""
    return ([f"{t.task_id}: {t.why[0]}" for t in row.tasks if t.why is not None and t.why[0] in HARNESS_FAULTS]
            + [f"{t.task_id}: the null policy scores 1.0" for t in row.tasks if t.null >= 1])


def markdown(rows: Sequence[RowCheck], header: Sequence[str]) -> str:
    """The table (with the fitted and direct-replay means, the scripted mean on the tasks evaluation plays, and each
    row's setting and note) and, per benchmark, every task where the scripted policy scores below 1.0, grouped by why,
    and every fault (`faults`)."""
    lines = ["# Harness check", "", *header, "",
             "| Benchmark | n | Scripted | Null | Scripted, caps that fit | Ground truth replayed | Scripted on "
             "evaluation's tasks | Setting | Note |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        evaluated = ("all" if row.evaluated is None or row.evaluated >= len(row.tasks) else
                     f"{_number(row.mean('scripted', row.evaluated), 3)} (first {row.evaluated})")
        cells = [row.benchmark, str(len(row.tasks)), *(_number(row.mean(f), 3) for f in
                                                      ("scripted", "null", "fitted", "direct")),
                 evaluated if row.tasks else "n/a", row.setting, row.note]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Where the scripted policy does not reach 1.0", ""]
    for row in rows:
        if not row.tasks:
            continue
        short = [t for t in row.tasks if t.why is not None]
        lines.append(f"### {row.benchmark}: {len(short)} of {len(row.tasks)} tasks" + ("" if short else " (none)"))
        kinds: dict[str, list[TaskCheck]] = {}
        for task in short:
            kinds.setdefault(task.why[0], []).append(task)
        for kind, tasks in kinds.items():
            lines.append(f"- **{kind}** ({len(tasks)}): " + "; ".join(
                f"`{t.task_id}` {t.scripted:.2f}: {t.why[1]}" for t in tasks))
        if found := faults(row):
            lines.append(f"- **harness faults** ({len(found)}): " + "; ".join(found))
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
