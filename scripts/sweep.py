"""The paper's analysis figures from DVC experiments: `python scripts/sweep.py run fig3` runs one experiment per
sweep point without a current run, one after another, then draws; `draw fig3` only draws what has run; `queue fig3`
only queues them (start them with `dvc queue start`). A point run on an earlier commit stays current while the code,
data and params it ran are unchanged (`evaluation.sweeps.stale_reason`), so a sweep can span sessions and commits.

Figures (reports/figures/<figure>.{png,pdf,csv}; each also logged to the latest `report` MLflow run; Fig. 4, the
default run's training dynamics, needs no experiments: the `report` stage draws it):
  fig3  effect of joint optimisation: a frozen phi_0 and margins m in {0 (no constraint), 0.01, 0.02, 0.05, 0.1}
  fig5  sensitivity: latent tokens K in {8, ..., 128} and retrievals n_ret in {1, 2, 3, 5, 10}
Each point runs only the stage its metric needs (evaluation.sweeps.TARGET_STAGE) and what that stage's changed
params invalidate upstream; everything else comes from the cache.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evaluation import sweeps  # noqa: E402
from evaluation.paper_figures import draw_sweep  # noqa: E402
from lopd.core.config import ConfigError, load_config  # noqa: E402

FIGURES_DIR = REPO / "reports" / "figures"
CSV_FIELDS = ["figure", "point", "x", "metric", "value", "low", "high", "n", "experiment", "status"]


def dvc(*args: str) -> str:
    proc = subprocess.run(["dvc", *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"error: dvc {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return proc.stdout


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def exp_ref(name: str) -> str:
    """The git ref of experiment `name` on the current commit (DVC's layout: refs/exps/<sha[:2]>/<sha[2:]>/<name>)."""
    sha = git("rev-parse", "HEAD").strip()
    return f"refs/exps/{sha[:2]}/{sha[2:]}/{name}"


def configurations(figure: str, cfg) -> dict[str, dict]:
    """Experiment name -> the params.yaml overrides it runs with, one per distinct configuration of the figure."""
    names = sweeps.experiment_names(figure, cfg.to_dict(), cfg.profile)
    points = {(s.name, p): v for s in map(sweeps.SWEEPS.get, sweeps.FIGURES[figure]) for p, v in s.points.items()}
    return {name: sweeps.point_params(points[key], figure, cfg.profile) for key, name in names.items()}


def workspace_lock(stage: str, strict: bool) -> dict:
    """The workspace's dvc.lock, which sweep points are checked against; it must be current for `stage` and what it
    reads (else the check would accept points of code that has since changed): an error when `strict`, else a
    note."""
    import yaml

    changed = json.loads(dvc("status", "--with-deps", "--json", stage) or "{}")
    if changed:
        message = (f"dvc.lock is not current for {stage} ({', '.join(sorted(changed))} changed): run `dvc repro "
                   f"{stage}` first")
        if strict:
            sys.exit(f"error: {message}, so that the points start from its recorded stages")
        print(f"note: {message}; the figure shows the points that match the recorded run")
    return yaml.safe_load((REPO / "dvc.lock").read_text()) or {}


def current_runs(figure: str, domain: str, cfg, strict: bool = False) -> dict[str, dict]:
    """Name -> the finished experiment that scores each configuration of the figure on the workspace's code and
    data, from the experiments of every commit (`sweeps.stale_reason`): a sweep spans sessions and commits."""
    import yaml

    wanted, stage = configurations(figure, cfg), sweeps.TARGET_STAGE[domain]
    refs = git("for-each-ref", "--format=%(refname)", "refs/exps/").split()
    baselines = sorted({m[1] + m[2] for r in refs if (m := re.fullmatch(r"refs/exps/(\w\w)/(\w{38})/[^/]+", r))})
    show = json.loads(dvc("exp", "show", "--json", *(a for b in baselines or ["HEAD"] for a in ("--rev", b))))
    lock, runs, stale = workspace_lock(stage, strict), {}, {}
    for exp in sweeps.experiments(show):
        name = exp["name"]
        if name not in wanted or name in runs:
            continue
        point_lock = yaml.safe_load(git("show", f"{exp['rev']}:dvc.lock")) or {}
        if reason := sweeps.stale_reason(point_lock, lock, stage, wanted[name]):
            stale.setdefault(name, f"{name} ({exp['baseline'][:7]}: {reason})")
        else:
            runs[name] = exp
    if outdated := [why for name, why in stale.items() if name not in runs]:
        print(f"{figure}: not counted, run on other code or data: {'; '.join(outdated)}")
    return runs


def pending(figure: str, domain: str, cfg) -> list[tuple[str, list[str]]]:
    """(name, `dvc exp run` arguments) of every experiment of the figure (one per distinct configuration) without a
    current finished run, and not waiting in DVC's queue."""
    done, waiting = current_runs(figure, domain, cfg, strict=True), dvc("queue", "status")
    return [(name, ["-n", name, sweeps.TARGET_STAGE[domain], *sweeps.overrides(values, figure, cfg.profile)])
            for name, values in configurations(figure, cfg).items()
            if name not in done and not re.search(rf"\b{re.escape(name)}\b.*\b(Queued|Running)\b", waiting)]


def run_points(points: list[tuple[str, list[str]]], domain: str, drop_checkpoints: bool) -> list[str]:
    """Run the points one after another (two cores cannot share one LOPD run), each in a temporary copy of the
    repository, its output shown as it runs; the names of those that failed. A killed sweep loses only the point
    that was running: the next `run` starts from the first point without a finished experiment."""
    failed = []
    for i, (name, args) in enumerate(points, 1):
        print(f"=== [{i}/{len(points)}] {name}: dvc exp run --temp {' '.join(args)}", flush=True)
        ref = exp_ref(name)  # before the run: a commit made while it runs does not move its baseline
        if git("for-each-ref", ref).strip():  # a stale run of this commit would block the name
            print(f"{name}: removing its stale experiment on this commit")
            dvc("exp", "remove", ref)
        if subprocess.run(["dvc", "exp", "run", "--temp", *args], cwd=REPO).returncode:
            failed.append(name)
        elif drop_checkpoints:
            drop_trained_student(ref, sweeps.TRAINED_STAGE[domain])
    return failed


def drop_trained_student(ref: str, stage: str) -> None:
    """Remove the trained student of the experiment at git ref `ref` from DVC's cache (its metrics stay in the
    experiment; `dvc exp apply` of it then cannot check the checkpoint out), keeping every object the workspace's
    dvc.lock uses."""
    import yaml

    name = ref.rsplit("/", 1)[-1]
    shown = subprocess.run(["git", "show", f"{ref}:dvc.lock"], cwd=REPO, capture_output=True, text=True)
    if shown.returncode:
        print(f"{name}: cannot read its dvc.lock ({shown.stderr.strip()}), nothing dropped")
        return
    cache = Path(dvc("cache", "dir").strip()) / "files" / "md5"
    path = lambda md5: cache / md5[:2] / md5[2:]  # noqa: E731

    def dir_files(md5: str) -> list[str]:
        return [e["md5"] for e in json.loads(path(md5).read_text())] if path(md5).is_file() else []

    objects = sweeps.droppable_objects(yaml.safe_load(shown.stdout), yaml.safe_load((REPO / "dvc.lock").read_text()),
                                       stage, dir_files)
    freed = 0
    for md5 in sorted(objects, key=lambda m: not m.endswith(".dir")):  # listings first: never a listing without files
        if path(md5).is_file():
            freed += path(md5).stat().st_size
            path(md5).unlink()
    print(f"{name}: dropped {stage}'s student from the cache ({freed / 2**30:.2f} GiB)")


def draw(figure: str, domain: str, cfg) -> list[Path]:
    """Draw a figure from what has run; returns the files written."""
    out = FIGURES_DIR / figure
    runs, files, rows = current_runs(figure, domain, cfg), [], []
    names = sweeps.experiment_names(figure, cfg.to_dict(), cfg.profile)
    budget = sweeps.budget(figure, cfg.profile)
    for sweep in map(sweeps.SWEEPS.get, sweeps.FIGURES[figure]):
        mine = sweeps.collect(sweep, domain, runs, names)
        rows += mine
        title = (f"{sweep.title}: {domain} domain, {cfg.profile} profile, {cfg.model.name}"
                 + "".join(f", {key} {value}" for key, value in budget.items()))
        target = out if len(sweeps.FIGURES[figure]) == 1 else FIGURES_DIR / sweep.name
        files += draw_sweep(mine, list(sweep.points), sweep.default, sweep.x_label, sweep.x is not None,
                            target.with_suffix(".png"), title)
    write_csv(out.with_suffix(".csv"), rows)
    missing = sorted({r["experiment"] for r in rows if r["status"] == "missing"})
    if missing:
        print(f"{figure}: not run yet: {', '.join(missing)}")
    return [*files, out.with_suffix(".csv")]


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def log_to_report_run(cfg, files: list[Path]) -> None:
    """Add the figure files to the latest MLflow run named `report` (the one the tables are on), if there is one."""
    from lopd.core.tracking import log_to_latest_run

    if not log_to_latest_run(cfg, "report", files):
        print("MLflow: no `report` run to add the figures to (run `dvc repro report` first); files are in "
              f"{FIGURES_DIR.relative_to(REPO)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["run", "queue", "draw"])
    parser.add_argument("figures", nargs="+", choices=["fig3", "fig5"])
    parser.add_argument("--drop-checkpoints", action="store_true",
                        help="run: after each point, remove its trained student from DVC's cache (2.5 GB per point "
                             "at 0.5B); its metrics, which the figure reads, stay")
    parser.add_argument("--domain", choices=["code", "agentic"],
                        help="sweep domain (default: agentic on the paper profile, else code: the cpu model's "
                             "learning signal is in code)")
    args = parser.parse_args()
    try:
        cfg = load_config(REPO / "params.yaml")
    except ConfigError as err:
        sys.exit(f"error: {err}")
    domain = args.domain or sweeps.figure_domain(cfg.profile)
    points = [p for f in args.figures for p in pending(f, domain, cfg)] if args.action != "draw" else []
    if args.action == "queue":
        for _, point_args in points:
            dvc("exp", "run", "--queue", *point_args)
        print(f"queued {len(points)} experiment(s): {', '.join(n for n, _ in points) or 'none (every point has run)'}")
    if args.action == "run":
        print(f"{len(points)} point(s) to run: {', '.join(n for n, _ in points) or 'none (every point has run)'}")
        if failed := run_points(points, domain, args.drop_checkpoints):
            print(f"failed: {', '.join(failed)} (their output is above; the figure shows them as missing)")
    if args.action in ("run", "draw"):
        files = [path for f in args.figures for path in draw(f, domain, cfg)]
        log_to_report_run(cfg, files)
        print("wrote " + ", ".join(str(p.relative_to(REPO)) for p in files))


if __name__ == "__main__":
    main()
