"""`python -m pipelines.restore STAGE`: put back the outputs that DVC deleted before STAGE ran, after STAGE failed.

`dvc repro` and `dvc exp run` delete a stage's outputs before its command starts, all but those marked `persist`.
Every stage of dvc.yaml persists its outputs (it writes them anew itself) but the banks' and pools'
(build_bank, build_pool and their agentic twins): DVC's run cache, which a `persist` output turns off, brings those
back without a re-run whenever their inputs recur (docs/outputs.md). When one of them fails under DVC, its error line
names this command. A failed stage leaves dvc.lock as it was, so it still records the previous outputs: each deleted
one comes back as dvc.lock records it, a cached one from DVC's cache (as `dvc checkout` does), a file git tracks
(a metrics file) from DVC's cache too (the run cache keeps a copy) or else from git's HEAD, where either holds it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import yaml

from lopd.core.config import REPO_ROOT

KEPT = "the stage's previous outputs are kept"


def deletes_outputs(stage: str) -> bool:
    """Whether DVC deletes some output of `stage` before running it (one not `persist`). `stage` is named as DVC
    names it in DVC_STAGE: `build_bank`, `eval@grpo`, `pipelines/learn/dvc.yaml:learn_select`."""
    dvc_file, _, name = stage.rpartition(":")
    path = REPO_ROOT / (dvc_file or "dvc.yaml")
    if not path.is_file():  # DVC run from a subfolder names the file from there: no hint rather than a wrong one
        return False
    definition = yaml.safe_load(path.read_text())["stages"].get(name.split("@")[0], {})
    definition = definition.get("do", definition)  # a foreach stage's definition
    return any(not (flags or {}).get("persist")
               for kind in ("outs", "metrics", "plots") for out in definition.get(kind, [])
               for flags in (out.values() if isinstance(out, dict) else [None]))


def restore_hint() -> str | None:
    """For a stage that fails under DVC after DVC deleted some of its outputs: the command that puts them back."""
    stage = os.environ.get("DVC_STAGE")
    if not stage or not deletes_outputs(stage):
        return None
    return f"DVC deleted the stage's previous outputs before it ran: python -m pipelines.restore {stage} puts them back"


def previous_outputs() -> str:
    """What became of the stage's previous outputs, for its error line: kept, or how to put them back."""
    return restore_hint() or KEPT


@contextlib.contextmanager
def naming_restore() -> Iterator[None]:
    """A stage's one-line error (a SystemExit with a message) also names `restore_hint`'s command, where it has one."""
    try:
        yield
    except SystemExit as stop:
        hint = restore_hint() if isinstance(stop.code, str) else None
        if hint and hint not in stop.code:
            raise SystemExit(f"{stop.code}; {hint}") from None
        raise


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def recorded_content(relpath: str, digest: str, cached: Path) -> tuple[bytes, str] | None:
    """The bytes whose md5 is `digest` (as dvc.lock records `relpath`) and where they came from: DVC's cache object
    `cached`, or the file at git's HEAD; None where neither holds them."""
    if cached.is_file() and md5(data := cached.read_bytes()) == digest:
        return data, "DVC's cache"
    head = subprocess.run(["git", "show", f"HEAD:{relpath}"], cwd=REPO_ROOT, capture_output=True)
    if head.returncode == 0 and md5(head.stdout) == digest:
        return head.stdout, "git HEAD"
    return None


def write_whole(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".tmp-{path.name}")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", help="the stage as its error line names it, e.g. build_bank")
    args = parser.parse_args()
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    with Repo(str(REPO_ROOT)) as repo:
        try:
            (stage,) = repo.stage.collect(args.stage)
        except (DvcException, ValueError) as err:  # ValueError: a target that names several stages
            sys.exit(f"error: {args.stage}: not one stage of this repository ({err})")
        deleted = [out for out in stage.outs if not out.persist]
        if not deleted:
            print(f"{args.stage}: every output persists: DVC deleted none, nothing to restore")
            return
        if unrecorded := [out.def_path for out in deleted if not out.hash_info]:
            sys.exit(f"error: {args.stage}: dvc.lock records no {', '.join(unrecorded)} (the stage never finished "
                     "here): nothing to restore")
        for out in deleted:
            path, digest = Path(out.fs_path), out.hash_info.value
            if out.use_cache:  # as `dvc checkout` does (it skips an output that is as recorded)
                try:
                    added, modified = out.checkout(force=True)
                except DvcException:
                    sys.exit(f"error: {out.def_path}: not in DVC's cache as dvc.lock records it (from a remote: "
                             f"dvc pull {args.stage})")
                if added or modified:
                    print(f"restored {out.def_path} (DVC's cache)")
            elif not (path.is_file() and md5(path.read_bytes()) == digest):
                found = recorded_content(path.relative_to(REPO_ROOT).as_posix(), digest,
                                         Path(repo.cache.local.oid_to_path(digest)))
                if found is None:
                    sys.exit(f"error: {out.def_path}: neither DVC's cache nor git's HEAD holds it as dvc.lock records "
                             "it")
                write_whole(path, found[0])
                print(f"restored {out.def_path} ({found[1]})")


if __name__ == "__main__":
    main()
