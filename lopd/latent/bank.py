"""The experience bank: successful training-split rollouts of the base model.

An entry is (task text, trace, response, turns): `trace` is the compact, observation-lite form the retriever and
the composer read (coding: the solution code; agentic: `tool(args) -> short result` lines), `response` the
rollout's text (what a demonstration pool shows), `turns` the episode's tokens as the policy sampled them, which
the cold start trains on. The bank is a JSONL file with a version header line; no evaluation task may ever enter
it (`check_no_eval_overlap`, run on every write and read).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, get_type_hints

from accelerate import PartialState

from lopd.core.config import Config
from lopd.core.distributed import gather_shares, process_share
from lopd.core.jsonl import check_fields, read_jsonl_objects
from lopd.core.models import load_tokenizer
from lopd.core.progress import progress, write
from lopd.core.rollout import Rollouts, Task, make_backend, sampling_params, step_seed
from lopd.core.trajectory import Trajectory, Turn

BANK_VERSION = 2  # 2: entries carry the episode's tokens (`turns`)


@dataclass(frozen=True)
class BankEntry:
    task_id: str
    task: str
    """The task description (first user message)."""
    trace: str
    """Observation-lite trajectory: what retrieval embeds and the composer encodes."""
    response: str
    """The rollout's text: the completion (code), or the observation-lite trace (agentic)."""
    reward: float
    turns: list[list[list[int]]]
    """The episode after its prompt, as sampled: `[[context_ids, action_ids], ...]`, the first context empty (a
    teacher's prompt takes its place), later contexts the environment's tokens. The cold start's NLL target is
    every action token, the environment's masked out (`episode`)."""

    def __post_init__(self) -> None:
        if not self.turns or any(not isinstance(t, list) or len(t) != 2 for t in self.turns):
            raise ValueError("field 'turns' must be a non-empty array of [context_ids, action_ids] pairs")
        if self.turns[0][0]:
            raise ValueError("field 'turns': the first turn's context must be empty (the prompt is not stored)")
        if any(not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
               for turn in self.turns for ids in turn):
            raise ValueError("field 'turns' must hold arrays of integer token ids")

    def episode(self) -> Trajectory:
        """The entry's episode as a trajectory without its prompt (a teacher view adds one): contexts masked,
        actions trained on."""
        return Trajectory(self.task_id, [Turn(context, actions, [0.0] * len(actions))
                                         for context, actions in self.turns])


def episode_turns(trajectory: Trajectory) -> list[list[list[int]]]:
    """A trajectory's turns as a bank entry stores them: the prompt dropped, everything else as sampled."""
    return [[[] if i == 0 else list(turn.context_ids), list(turn.action_ids)]
            for i, turn in enumerate(trajectory.turns)]


def task_text(messages: list[dict[str, str]]) -> str:
    """A task's description: its first user message."""
    return next(m["content"] for m in messages if m["role"] == "user")


def successful_entries(candidates: Iterable[tuple[str, str, Trajectory]], threshold: float,
                       trace_of: Callable[[str], str]) -> list[BankEntry]:
    """Bank entries from (task_id, task text, trajectory) rollouts: keep reward >= threshold and drop repeats of
    the same trace for the same task (pure; order preserved)."""
    seen: set[tuple[str, str]] = set()
    entries = []
    for task_id, task, trajectory in candidates:
        response, reward = trajectory.response, trajectory.reward
        if reward < threshold:
            continue
        trace = trace_of(response)
        if (task_id, trace) in seen:
            continue
        seen.add((task_id, trace))
        entries.append(BankEntry(task_id, task, trace, response, float(reward), episode_turns(trajectory)))
    return entries


def _shingles(text: str, n: int = 8) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i:i + n]) for i in range(max(len(words) - n + 1, 1))} if words else set()


def check_no_eval_overlap(entries: Iterable, train_ids: set[str], eval_tasks: Mapping[str, str],
                          max_containment: float = 0.5) -> None:
    """Raise ValueError if an entry (anything with `task_id` and `task`: a bank entry, a pool demonstration)
    is not from the training split or looks like an evaluation task.

    An entry is rejected when its task id is not a training task id, is an evaluation task id, or when
    more than `max_containment` of an evaluation prompt's word 8-grams occur in the entry's task text
    (the same problem under another id or framing).
    """
    eval_shingles = {tid: _shingles(text) for tid, text in eval_tasks.items()}
    for entry in entries:
        if entry.task_id not in train_ids:
            raise ValueError(f"entry {entry.task_id!r} is not a training task")
        if entry.task_id in eval_tasks:
            raise ValueError(f"entry {entry.task_id!r} is an evaluation task id")
        mine = _shingles(entry.task)
        for tid, theirs in eval_shingles.items():
            if theirs and len(theirs & mine) / len(theirs) > max_containment:
                raise ValueError(f"entry {entry.task_id!r} overlaps evaluation task {tid!r}")


def write_records(path: str | Path, records: list, header: dict) -> None:
    """A JSONL file: one header line (version and metadata), then one dataclass record per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write(json.dumps(header) + "\n")
        for record in records:
            f.write(json.dumps(asdict(record)) + "\n")


def read_records(path: str | Path, record_type: type, version_key: str, version: int, what: str,
                 stage: str) -> tuple[list, dict]:
    """Records and the header of a `write_records` file. A missing file is a FileNotFoundError naming the stage
    to run; a malformed one (not UTF-8, a line that is not a JSON object, another version, a missing, unknown or
    mistyped field) a one-line ValueError naming the file, the line and the field."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: {what} not found (run the {stage} stage)")
    rows = read_jsonl_objects(path)
    if not rows:
        raise ValueError(f"{path}: not a valid {what} (empty, no header line)")
    number, meta = rows[0]
    if meta.get(version_key) != version:
        raise ValueError(f"{path}: line {number}: not a valid {what} header "
                         f"({version_key} {meta.get(version_key)!r}, expected {version})")
    types = get_type_hints(record_type)
    records = []
    for number, value in rows[1:]:
        where = f"{path}: line {number}: not a valid {what} entry"
        try:  # the record's own checks (__post_init__) name the field, not the file
            records.append(record_type(**check_fields(value, types, where)))
        except ValueError as err:
            raise ValueError(str(err) if str(err).startswith(where) else f"{where}: {err}") from None
    return records, meta


def write_bank(path: str | Path, entries: list[BankEntry], meta: dict) -> None:
    write_records(path, entries, {"bank_version": BANK_VERSION, **meta})


def read_bank(path: str | Path) -> tuple[list[BankEntry], dict]:
    """Entries and the header's metadata; a missing or malformed file is a one-line ValueError."""
    return read_records(path, BankEntry, "bank_version", BANK_VERSION, "experience bank", "build_bank")


BANK_SEED_RANK = 1_000  # a seed stream of its own, apart from the training loop's (seed, step, rank)
BANK_TASKS_PER_BATCH = 32
"""Tasks `sample_rollouts` plays together, `bank.samples_per_task` rollouts each."""


def bank_batch_seed(cfg: Config, batch: int, rank: int) -> int:
    """The seed of a process's `batch`-th batch of bank rollouts."""
    return step_seed(cfg.seed, batch, rank=BANK_SEED_RANK + rank)


def sample_rollouts(cfg: Config, tasks: list[Task], collect: Rollouts, base_dir: str | Path,
                    tasks_per_batch: int = BANK_TASKS_PER_BATCH) -> list[tuple[str, str, Trajectory]]:
    """`bank.samples_per_task` base-model rollouts per training task, scored: (task_id, task text, trajectory)
    in task order. Seeded per batch of tasks."""
    tokenizer = load_tokenizer(base_dir)
    backend = make_backend(base_dir, tokenizer, cfg, cfg.sampling.batch_size)
    params = sampling_params(cfg, cfg.sampling.max_new_tokens)
    rank = PartialState().process_index  # several processes: each samples its own share of the tasks
    share = [tasks[i] for i in process_share(len(tasks))]
    mine = []
    with progress(total=len(share), desc="bank rollouts", unit="task") as bar:  # sampled and scored
        for b, start in enumerate(range(0, len(share), tasks_per_batch)):
            chunk = share[start:start + tasks_per_batch]
            trajectories = collect(backend, tokenizer, chunk, params,
                                   bank_batch_seed(cfg, b, rank), cfg.bank.samples_per_task)
            by_id = {t.task_id: t for t in chunk}
            mine.append([(t.task_id, task_text(by_id[t.task_id].messages), t) for t in trajectories])
            bar.update(len(chunk))
            write(f"[build_bank] {start + len(chunk)}/{len(share)} tasks, "
                  f"{sum(t.reward >= cfg.bank.success_threshold for part in mine for *_, t in part)} successes")
    per_task = [rollouts for part in mine for rollouts in _by_task(part)]  # [task of the share][its rollouts]
    return [r for rollouts in gather_shares(per_task, len(tasks)) for r in rollouts]


def _by_task(rollouts: list[tuple[str, str, Trajectory]]) -> list[list[tuple[str, str, Trajectory]]]:
    """A batch's rollouts grouped by task, in task order (`collect` returns each task's rollouts together)."""
    groups: dict[str, list] = {}
    for rollout in rollouts:
        groups.setdefault(rollout[0], []).append(rollout)
    return list(groups.values())
