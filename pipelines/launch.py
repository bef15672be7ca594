"""`python -m pipelines.launch STAGE [ARGS...]`: run the stage CLI `pipelines.STAGE` on `launch.processes` processes.

dvc.yaml runs every stage that trains, samples or evaluates through here, so `dvc repro` and
`dvc exp run -S launch.processes=2` start the processes themselves (torchrun, or `accelerate launch`), and dvc.lock
records the command and the `launch` params that ran. Each process samples its own share of the work on its own
device (lopd.core.device: the local GPU, else the CPU with gloo); process 0 alone writes the stage's outputs and logs
its one MLflow run. A stage that cannot use several processes says so and runs on one (`ONE_PROCESS`).

Checked before anything starts, each a one-line error: the params, a count larger than the visible GPUs (or, without
a GPU, the CPU cores), and a count that does not split the tasks of a step evenly.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from lopd.core.config import REPO_ROOT, ConfigError, LaunchConfig, load_config, process_split_error
from pipelines.restore import naming_restore

MULTI_PROCESS = ("train", "validate_base", "build_bank", "cold_start", "evaluate", "evaluate_agentic",
                 "evaluate_base_composer", "evaluate_agentic_base_composer", "learn_race")
"""Stage CLIs that split their work over the processes (rollouts, batches, benchmark tasks, episodes); process 0
writes the outputs."""
ONE_PROCESS = {"latent_decode": "a short diagnostic: LM-head projections of 20 tasks' latents",
               "learn_select": "one screen of the candidate tasks by the base model"}
"""Stage CLIs that run under the launcher on one process whatever `launch.processes` says, and why. Every other
stage (prepare_model, build_pool, report) uses no model on a device and runs as `python -m pipelines.<stage>`."""


def resolve_processes(launch: LaunchConfig, gpus: int, cpus: int) -> int:
    """The process count `launch.processes` stands for on a machine with `gpus` visible GPUs and `cpus` cores."""
    n = max(gpus, 1) if launch.processes == "auto" else launch.processes
    if gpus and n > gpus:
        raise ConfigError(f"launch.processes: {n} processes but {gpus} visible GPU(s) (one process per GPU; see "
                          "CUDA_VISIBLE_DEVICES)")
    if not gpus and n > cpus:
        raise ConfigError(f"launch.processes: {n} processes but no GPU and {cpus} CPU core(s)")
    return n


def command(stage: str, args: list[str], processes: int, launcher: str, port: int = 0) -> list[str]:
    """The command line that runs `pipelines.<stage> args` on `processes` processes (`port`: accelerate's rendezvous;
    torchrun --standalone picks a free one itself)."""
    python, module = sys.executable, f"pipelines.{stage}"
    if processes == 1:
        return [python, "-m", module, *args]
    if launcher == "torchrun":
        return [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
                "-m", module, *args]
    return [python, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--main_process_port", str(port), "-m", module, *args]


def visible_gpus() -> int:
    import torch  # a second or two: only when several processes may be asked for

    return torch.cuda.device_count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=[*MULTI_PROCESS, *ONE_PROCESS], help="the stage CLI: pipelines/<stage>.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the stage's own arguments (--params included)")
    args = parser.parse_args()
    params = args.args[args.args.index("--params") + 1] if "--params" in args.args[:-1] else REPO_ROOT / "params.yaml"
    try:
        cfg = load_config(params)
        gpus = visible_gpus() if cfg.launch.processes != 1 else 0  # one process fits anywhere: skip torch's import
        processes = resolve_processes(cfg.launch, gpus, os.cpu_count() or 1)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    if args.stage in ONE_PROCESS and processes > 1:
        print(f"launch: {args.stage} runs on one process of the {processes} asked for: {ONE_PROCESS[args.stage]}",
              file=sys.stderr)
        processes = 1
    if error := process_split_error(cfg, processes):  # `auto` is resolved only here
        sys.exit(f"error: launch.processes: {error}")
    port = free_port() if cfg.launch.launcher == "accelerate" and processes > 1 else 0
    argv = command(args.stage, args.args, processes, cfg.launch.launcher, port)
    sys.stdout.flush()
    os.execv(argv[0], argv)  # the stage replaces this process: DVC sees its exit status and signals


if __name__ == "__main__":
    with naming_restore():  # its errors too, under DVC, name how to put back what DVC deleted
        main()
