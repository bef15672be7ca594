"""Shared plumbing for the stage CLIs: config loading, output paths, domains, and what code a stage runs.

Kept light on purpose: every stage imports this module, so it imports no method, no domain's tasks and no
evaluation code. Those are imported by name when a stage needs them (`stage_modules` says which).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from evaluation.coding.code_blocks import extract_code
from lopd.core import registry
from lopd.core.checkpoint import MANIFEST, UnwritableOutput, policy_dir
from lopd.core.config import REPO_ROOT, Config, ConfigError, LearnConfig, build_config, load_config
from lopd.core.device import reuse_freed_memory, use_cpu_matmul
from lopd.core.domain import Domain, SandboxUnavailable
from lopd.core.experiments import flatten
from lopd.core.jsonl import UnreadableFile, read_json
from lopd.core.models import UnreadableWeights, check_model_dir
from lopd.core.progress import quiet_libraries
from lopd.core.tracking import Tracker
from pipelines.restore import naming_restore, previous_outputs

if TYPE_CHECKING:
    from lopd.core.methods import Method
    from lopd.core.rollout import Task, TrainingSplit

BASE_MODEL_DIR = REPO_ROOT / "models" / "base"
BANK_DIR = REPO_ROOT / "bank"
COMPOSER_DIR = REPO_ROOT / "checkpoints" / "composer"
POOL_DIR = REPO_ROOT / "pool"
CHECKPOINTS_DIR = REPO_ROOT / "checkpoints"
METRICS_DIR = REPO_ROOT / "metrics"
RESULTS_DIR = REPO_ROOT / "results"
PLOTS_DIR = REPO_ROOT / "plots"


def parse_args(description: str, **arguments: dict[str, Any]) -> tuple[argparse.Namespace, Config]:
    """Parse `--params` plus the stage's own arguments; a bad config exits with its one-line error."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default=str(REPO_ROOT / "params.yaml"), help="params file (default: params.yaml)")
    for name, spec in arguments.items():
        parser.add_argument(f"--{name}", **spec)
    args = parser.parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun: only a stage that splits its work may run
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        stage = spec.name.removeprefix("pipelines.") if spec else parser.prog
        from pipelines.launch import MULTI_PROCESS  # only here: the launcher's tables, light to import

        if stage not in MULTI_PROCESS:
            sys.exit(f"error: pipelines.{stage} runs on one process (every process would redo its work): start it "
                     f"with `python -m pipelines.{stage}`, not under torchrun")
    quiet_libraries()
    try:
        cfg = load_config(args.params)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    use_cpu_matmul(cfg.model.cpu_matmul)
    return args, cfg


def response_as_trace(response: str) -> str:
    """An agentic episode's response already is its observation-lite trace."""
    return response


DOMAINS = {
    "code": Domain("code", BANK_DIR, POOL_DIR, COMPOSER_DIR, CHECKPOINTS_DIR, METRICS_DIR, RESULTS_DIR, PLOTS_DIR,
                   0.5, bank_trace=extract_code),
    "agentic": Domain("agentic", REPO_ROOT / "bank_agentic", REPO_ROOT / "pool_agentic",
                      CHECKPOINTS_DIR / "agentic" / "composer", CHECKPOINTS_DIR / "agentic", METRICS_DIR / "agentic",
                      RESULTS_DIR / "agentic", PLOTS_DIR / "agentic", 0.9, bank_trace=response_as_trace),
}


def domain_module(domain: str) -> str:
    """The module that provides a domain's training tasks (`pipelines/domains/<domain>.py`)."""
    return f"pipelines.domains.{domain}"


DOMAIN_STAGES = ("pipelines.train", "pipelines.validate_base", "pipelines.build_bank", "pipelines.build_pool",
                 "pipelines.cold_start", "pipelines.learn_select", "pipelines.learn_race")
"""The CLIs that read their domain's training tasks through `training_domain`, or check its sandbox through
`check_sandbox` (by name, so the scan needs telling)."""
METHOD_STAGES = ("pipelines.train",)
"""The CLIs that build their `--method` through the registry (by name)."""
RUN_STAGES = ("pipelines.learn_race",)
"""The CLIs that build the method of their `--run` (<race>.runs.<run>.method in params.yaml) through the registry."""
RACE_STAGES = ("pipelines.learn_select", "pipelines.learn_race")
"""The domain stages whose domain is their `--race`'s (default: learn, the code domain), not a `--domain`."""
LAUNCHER = "pipelines.launch"


def stage_module(argv: list[str]) -> str:
    """The CLI module a dvc.yaml command runs: `python -m pipelines.X ...` or `python -m pipelines.launch X ...`."""
    module = argv[argv.index("-m") + 1]
    return f"pipelines.{argv[argv.index('-m') + 2]}" if module == LAUNCHER else module


def stage_modules(module: str, method: str | None = None, domain: str | None = None) -> list[str]:
    """The modules a stage command runs: its CLI module, plus the training domain's task module and the method's
    file, which the CLI imports by name. The import closure of these is the stage's code (see lopd.core.provenance)."""
    return [module, *([domain_module(domain)] if domain else []),
            *([registry.METHODS[method].factory.split(":")[0]] if method else [])]


def stage_name(stage: str, domain: str = "code", method: str | None = None) -> str:
    """The name of the DVC stage a CLI run stands for (its MLflow run name and its metrics' namespace), as in
    dvc.yaml: `build_bank`, `train@grpo`, `train_lopd` (a non-baseline method trains in its own stage),
    `train_agentic@grpo`, `eval@grpo`, `eval_agentic@grpo`, `eval_base_composer`."""
    suffix = "" if domain == "code" else f"_{domain}"
    if method is None:
        return f"{stage}{suffix}"
    if method in registry.EVALUATION_ROWS:  # not a method: its own stage per domain
        return f"{stage}{suffix}_{method}"
    if stage == "train" and not registry.METHODS[method].baseline:
        return f"train_{method}{suffix}"
    return f"{stage}{suffix}@{method}"


def trained_policy(domain: str, method: str) -> Path:
    """The model folder of `method`'s checkpoint in `domain` (the base model for vanilla). A missing or broken
    checkpoint, or a missing model, exits with a one-line error naming the folder and the stage to run."""
    checkpoint, run = DOMAINS[domain].checkpoints / method, f"run: dvc repro {stage_name('train', domain, method)}"
    try:
        model_dir = policy_dir(checkpoint, BASE_MODEL_DIR)
    except (OSError, ValueError, KeyError) as err:
        if not (checkpoint / MANIFEST).exists():  # never trained, or the run stopped before its first save
            sys.exit(f"error: {checkpoint}: no checkpoint here ({run})")
        sys.exit(f"error: {err} ({run})")
    try:
        check_model_dir(model_dir)
    except FileNotFoundError as err:
        if model_dir == BASE_MODEL_DIR:  # vanilla: its checkpoint stands for the base model
            sys.exit(f"error: {err}")
        sys.exit(f"error: {model_dir}: the checkpoint has no model ({run})")
    return model_dir


DOMAIN_ARG = {"default": "code", "choices": list(DOMAINS),
              "help": "training domain: code (TACO) or agentic (EnvScaler)"}
METHOD_ARG = {"required": True, "choices": list(registry.METHODS), "help": "method name, e.g. grpo"}


def for_domain(cfg: Config, domain: str) -> Config:
    """The config a domain's stages run with: the agentic domain takes its own step budgets (training, cold start),
    rollouts per step and bank settings from `agentic` (null keeps the shared value; a null task limit is no limit)."""
    if domain == "code":
        return cfg
    a = cfg.agentic
    raw = cfg.to_dict()
    raw["train"]["rollouts_per_step"] = a.rollouts_per_step or cfg.train.rollouts_per_step
    raw["bank"]["success_threshold"] = a.bank_success_threshold
    raw["bank"]["query_instruction"] = a.query_instruction
    raw["bank"]["samples_per_task"] = a.bank_samples_per_task or cfg.bank.samples_per_task
    raw["bank"]["task_limit"] = a.bank_task_limit
    if a.cold_start_steps is not None:
        raw["cold_start"]["steps"] = a.cold_start_steps
    if a.cold_start_held_out_tasks is not None:
        raw["cold_start"]["held_out_tasks"] = a.cold_start_held_out_tasks
    if a.steps is not None:
        for name in registry.METHODS:
            if "steps" in raw[name]:
                raw[name]["steps"] = a.steps
    return build_config(raw)


@dataclass(frozen=True)
class Race:
    """A learning race (pipelines/learn/dvc.yaml): its params section, which also names its stages
    (`<section>_select`, `<section>@<run>`, `<section>_report`) and its output folders, the domain its tasks come
    from, and its report's file name."""

    section: str
    domain: str
    report: str

    @property
    def results(self) -> Path:
        """The race's outputs but its plots: the held-in tasks, and its stages' metrics files under metrics/ here,
        apart from METRICS_DIR, which the paper's report reads whole (a race metric there would make the race a stage
        upstream of that report)."""
        return RESULTS_DIR / self.section

    @property
    def selection(self) -> Path:
        """The held-in tasks and the base model's step 0 on them (stage `<section>_select`)."""
        return self.results / "selection.json"

    @property
    def plots(self) -> Path:
        return PLOTS_DIR / self.section

    @property
    def checkpoints(self) -> Path:
        """A run's checkpoint while it trains (a killed run resumes from `.resume/` here)."""
        return CHECKPOINTS_DIR / self.section

    @property
    def table(self) -> Path:
        """reports/tables/<report>, without its suffix (.md, .csv)."""
        return REPO_ROOT / "reports" / "tables" / self.report

    @property
    def figure(self) -> Path:
        """reports/figures/<report>, without its suffix (.png, .pdf, .csv)."""
        return REPO_ROOT / "reports" / "figures" / self.report

    def stage(self, part: str) -> str:
        """The DVC stage name of `part`: select, report, or a run's name (`learn_tool@grpo`)."""
        return f"{self.section}_{part}" if part in ("select", "report") else f"{self.section}@{part}"

    def settings(self, cfg: Config) -> LearnConfig:
        """The race's params section."""
        return getattr(cfg, self.section)

    def max_steps(self, cfg: Config) -> int | None:
        """Policy steps per episode of the race's tasks; None for single-turn tasks (code)."""
        return cfg.agentic.max_steps if self.domain == "agentic" else None


RACES = {"learn": Race("learn", "code", "learning_race"),
         "learn_tool": Race("learn_tool", "agentic", "tool_learning_race")}
"""The learning races by params section: `make learn` runs both, `make learn-tool` the tool-use one."""
RACE_ARG = {"default": "learn", "choices": list(RACES),
            "help": "the race: learn (coding tasks) or learn_tool (tool-use episodes)"}


def race_domain_config(cfg: Config, race: Race) -> Config:
    """The config a race's stages play their tasks with: its domain's (`for_domain`) with the race's response budget,
    for tool use the budget of each policy step (agentic.max_step_tokens); an episode keeps agentic.max_steps."""
    budget = race.settings(cfg).max_new_tokens
    raw = for_domain(cfg, race.domain).to_dict()
    raw["sampling"]["max_new_tokens"] = budget
    if race.domain == "agentic":
        raw["agentic"]["max_step_tokens"] = budget
    return build_config(raw)


@contextlib.contextmanager
def training_domain(cfg: Config, domain: str) -> Iterator[TrainingSplit]:
    """A domain's training split: chat tasks, how to roll them out and score them, the data's name and the held-out
    validation tasks."""
    with importlib.import_module(domain_module(domain)).training_tasks(cfg) as split:
        yield split


def check_sandbox(domain: str) -> None:
    """Raise SandboxUnavailable (`run_stage` makes it one line) unless the sandbox that scores `domain` runs known
    programs right (the domain module's `check_sandbox`). Every stage that scores code or tool use calls it before
    any work, so a sandbox that cannot run code stops the stage instead of scoring every answer 0."""
    importlib.import_module(domain_module(domain)).check_sandbox()


def base_validation_measurement(cfg: Config, validation: Sequence[Task], processes: int) -> dict[str, Any]:
    """How a code training run measures its validation points, besides the weights (greedy: no seed draws): the base
    model's point (`base_validation_file`) is its step 0 only where it was measured alike. `processes`: each plays its
    share of the tasks, and the per-task scores come in the order of the shares."""
    return {"model": cfg.model.name, "decoding": "greedy", "max_new_tokens": cfg.sampling.max_new_tokens,
            "tasks": [task.task_id for task in validation], "processes": processes}


def base_validation_file() -> Path:
    """The base model's validation point (stage validate_base): the step 0 of every code training run."""
    return DOMAINS["code"].results / "validation" / "base.json"


def base_validation_step0(cfg: Config, validation: Sequence[Task], processes: int) -> dict[str, Any] | None:
    """The base model's validation point where stage validate_base measured it as this run would (its file says how),
    else None (no file, or measured otherwise): the run measures its own step 0."""
    path = base_validation_file()
    if not path.exists():
        return None
    recorded = read_json(path)
    return recorded["step0"] if recorded["measurement"] == base_validation_measurement(cfg, validation, processes) \
        else None


def build_method(name: str, cfg: Config, domain: str = "code") -> Method:
    if name not in registry.METHODS:
        sys.exit(f"error: unknown method {name!r} (known: {', '.join(registry.METHODS)})")
    return registry.METHODS[name].method_class()(cfg, DOMAINS[domain])  # imports that method's module only


DISK_ERRORS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
"""What a full disk, a file-size limit (`ulimit -f`) or a folder the stage may not write raise while it writes."""


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's (or a benchmark script's) `main`: a missing upstream output, a weights or JSON file it cannot
    read, an output folder it cannot write or a setting the machine cannot run ends it with one line naming the
    file or key and what to do, not a traceback (nothing has been written by then). So do a full disk and Ctrl-C,
    which leave the outputs as they were (they are replaced only once whole) and a training run's last saved step.
    Under DVC, a stage whose outputs DVC deleted before it ran also names the command that puts them back
    (pipelines/restore.py)."""
    reuse_freed_memory()
    with naming_restore():
        try:
            main()
        except (ConfigError, FileNotFoundError, UnreadableWeights, UnreadableFile, UnwritableOutput) as err:
            sys.exit(f"error: {err}")
        except SandboxUnavailable as err:
            sys.exit(f"error: sandbox: {err}")
        except OSError as err:
            if err.errno not in DISK_ERRORS:
                raise
            sys.exit(f"error: {err.filename or 'writing'}: {err.strerror}; {previous_outputs()}")
        except KeyboardInterrupt:
            print(f"interrupted: {previous_outputs()} (a training run resumes from its last saved step)",
                  file=sys.stderr)
            sys.exit(128 + signal.SIGINT)


def check_writable(paths: Iterable[Path]) -> None:
    """Raise UnwritableOutput naming the first folder of `paths`' folders where a file cannot be created. It creates
    one and deletes it: what the stage will do, whoever runs it (root ignores a folder's mode, not a read-only mount
    or an immutable folder). A stage calls it before it replaces anything."""
    for folder in sorted({Path(p).parent for p in paths}):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as err:
            raise UnwritableOutput(f"{folder}: cannot write here ({err.strerror or err}); the stage changed "
                                   "nothing") from None


@contextlib.contextmanager
def replacing(*paths: Path) -> Iterator[list[Path]]:
    """Temporary names beside `paths` for a stage to write its outputs to (a file, or a folder it creates and
    fills); once the block ends without error they replace `paths` (each by a rename; a folder whole, so no file of
    the previous one stays), and on an error they are deleted. A stage that fails while writing, say on a full
    disk, leaves the previous outputs as they were, all of them."""
    check_writable(paths)
    temporary = [path.with_name(f".tmp-{path.name}") for path in paths]
    for path in temporary:  # a killed run's: a folder must start empty
        remove(path)
    try:
        yield temporary
    except BaseException:
        for path in temporary:
            remove(path)
        raise
    for path, final in zip(temporary, paths):
        if path.is_dir() and final.exists():  # a rename cannot replace a folder that has files
            previous = final.with_name(f".old-{final.name}")
            remove(previous)
            os.replace(final, previous)
            os.replace(path, final)
            remove(previous)
        else:
            os.replace(path, final)


def remove(path: Path) -> None:
    """Delete a file or a folder, if there."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def write_json(path: Path, data: Any) -> None:
    """Write `data` as JSON, whole or not at all (through a temporary file renamed over `path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".tmp-{path.name}")
    temporary.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(temporary, path)


def uniform_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A per-step history with every key in every row (None where a step did not measure it, e.g. a GRPO step whose
    groups all tied has no PPO ratio): DVC renders a plot only from rows that share their keys."""
    keys = list(dict.fromkeys(key for row in rows for key in row))
    return [{key: row.get(key) for key in keys} for row in rows]


def write_history(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write a per-step history (a DVC plot) as a JSON list of `uniform_rows`."""
    write_json(path, uniform_rows(rows))


def write_metrics(path: Path, stage: str, metrics: dict[str, Any]) -> dict[str, float]:
    """Write a stage's DVC metrics file and return what was written, flattened (`envscaler.score`): numbers only,
    possibly in nested sections (None, meaning not measured, is left out), under the stage's name, so every column
    of `dvc exp show` has a short unique name (`train_lopd.beta_final`; DVC prefixes a name two files share with the
    file's path)."""
    def numbers(section: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out = {}
        for key, value in section.items():
            if isinstance(value, dict):
                out[key] = numbers(value, f"{prefix}{key}.")
            elif value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise TypeError(f"{path}: metric {prefix}{key} must be a number, not {value!r}")
                out[key] = value
        return out

    scalars = numbers(metrics)
    write_json(path, {stage: scalars})
    return flatten(scalars)


def recorded_summaries() -> dict[str, dict[str, float]]:
    """Every stage's recorded summary: stage -> the numbers of its metrics file (metrics/**/*.json), flattened."""
    return {stage: flatten(numbers) for path in sorted(METRICS_DIR.rglob("*.json"))
            for stage, numbers in read_json(path).items()}


def record_metrics(tracker: Tracker, path: Path, stage: str, metrics: dict[str, Any]) -> None:
    """Write a stage's metrics file (`write_metrics`) and log the same numbers and the file to its MLflow run, and the
    numbers to its invocation's parent run under the stage's name."""
    summary = write_metrics(path, stage, metrics)
    tracker.log_metrics(summary)
    tracker.log_to_parent(summary)
    tracker.log_artifact(path)
