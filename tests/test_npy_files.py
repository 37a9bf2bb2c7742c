"""One reader of .npy/.npz headers: the chunk folders and the command line agree.

The same damaged file gives the same message whether the command line reads
it whole or :func:`sklearn_calib.chunked.open_chunks` reads it by rows or as
a chunk, and the chunk readers now apply the command line's checks too (size
against header, crafted archive members). Honest files are checked against
``numpy.load``.
"""

import re

import numpy as np
import pytest

from sklearn_calib import cli
from sklearn_calib.chunked import open_chunks
from sklearn_calib.cli import _io
from sklearn_calib.utils._npy_files import (
    npy_file_header,
    npz_keys,
    npz_member_header,
    read_npy,
    read_npz_member,
)

from .cli.test_file_safety import damaged_npy, npy_bytes, npy_header, write_zip

CASES = [
    "truncated_data",
    "truncated_header",
    "too_short",
    "not_npy",
    "declares_1e12",
    "extra_bytes",
    "object",
    "structured",
    "bad_version",
    "damaged_header",
]


def _message(call):
    with pytest.raises((ValueError, cli.CommandError)) as error:
        call()
    # numpy's own header messages may quote an object's address.
    return re.sub(r"0x[0-9a-f]+", "0x", str(error.value))


@pytest.mark.parametrize("case", CASES)
def test_damaged_npy_same_message_everywhere(tmp_path, case):
    folder = tmp_path / "chunks"
    folder.mkdir()
    path = folder / "logits.npy"
    path.write_bytes(damaged_npy(case))
    np.save(folder / "y.npy", np.zeros(100, dtype=int))
    from_utils = _message(lambda: read_npy(path))
    assert _message(lambda: npy_file_header(path)) == from_utils
    assert _message(lambda: _io.read_npy(path)) == from_utils
    assert _message(lambda: open_chunks(folder)) == from_utils
    assert from_utils.startswith(f"{path}: ")


@pytest.mark.parametrize("case", CASES)
def test_damaged_npz_member_same_message_everywhere(tmp_path, case):
    folder = tmp_path / "chunks"
    folder.mkdir()
    path = write_zip(
        folder / "part.npz",
        {"logits.npy": [damaged_npy(case)], "y.npy": [npy_bytes(np.zeros(100))]},
    )
    from_utils = _message(lambda: read_npz_member(path, "logits"))
    assert from_utils.startswith(f"{path} [logits]: ")
    assert _message(lambda: _io.read_arrays(path)["logits"]) == from_utils
    # The header and the member's size show the problem: refused when the
    # folder opens, before any data is read.
    assert _message(lambda: npz_member_header(path, "logits")) == from_utils
    assert _message(lambda: open_chunks(folder)) == from_utils


def test_chunk_member_inflating_past_its_shape_is_refused(tmp_path):
    # The header declares 3 x 4 float64; the member holds 1 MB more. numpy's
    # own loader would read the first 96 bytes and ignore the rest.
    folder = tmp_path / "chunks"
    folder.mkdir()
    write_zip(
        folder / "part.npz",
        {
            "logits.npy": [npy_header((3, 4)), bytes(96 + 1_000_000)],
            "y.npy": [npy_bytes(np.zeros(3, dtype=int))],
        },
    )
    with pytest.raises(ValueError, match="unexpected bytes follow.*crafted archive"):
        open_chunks(folder)


def test_honest_chunks_read_as_numpy_reads_them(tmp_path):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, 3)).astype(np.float32)
    y = rng.integers(0, 3, size=50)
    np.savez_compressed(tmp_path / "a.npz", logits=logits, y=y)
    assert npz_keys(tmp_path / "a.npz") == ["logits", "y"]
    header = npz_member_header(tmp_path / "a.npz", "logits")
    assert (header.shape, header.dtype) == ((50, 3), np.dtype(np.float32))
    np.testing.assert_array_equal(read_npz_member(tmp_path / "a.npz", "y"), y)
    np.save(tmp_path / "b.npy", logits)
    header = npy_file_header(tmp_path / "b.npy")
    assert header.offset == 128 and not header.fortran_order
    np.testing.assert_array_equal(
        read_npy(tmp_path / "b.npy"), np.load(tmp_path / "b.npy")
    )


def test_fortran_order_read_whole_but_not_by_rows(tmp_path):
    array = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    folder = tmp_path / "chunks"
    folder.mkdir()
    np.save(folder / "logits.npy", array)
    np.save(folder / "y.npy", np.zeros(3, dtype=int))
    np.testing.assert_array_equal(read_npy(folder / "logits.npy"), array)
    with pytest.raises(ValueError, match="Fortran"):
        open_chunks(folder)


def test_missing_member_and_not_an_archive(tmp_path):
    np.savez(tmp_path / "a.npz", logits=np.zeros((2, 2)))
    with pytest.raises(KeyError):
        npz_member_header(tmp_path / "a.npz", "y")
    (tmp_path / "b.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a .npz archive"):
        npz_keys(tmp_path / "b.npz")


def test_headers_are_parsed_one_at_a_time(tmp_path, monkeypatch):
    # numpy parses a header with ast.literal_eval, whose AST constructor in
    # CPython 3.11 keeps one recursion counter for all threads: npz members
    # read at once in dask's threads failed in CI with "SystemError: AST
    # constructor recursion depth mismatch". Every header is parsed under one
    # lock.
    from numpy.lib import format as npy_format

    from sklearn_calib.utils import _npy_files

    parse = npy_format.read_array_header_1_0
    held = []

    def spy(*args, **kwargs):
        held.append(_npy_files._HEADER_LOCK.locked())
        return parse(*args, **kwargs)

    monkeypatch.setattr(npy_format, "read_array_header_1_0", spy)
    np.savez(tmp_path / "a.npz", logits=np.zeros((5, 3)), y=np.zeros(5, int))
    np.testing.assert_array_equal(
        _npy_files.read_npz_member(tmp_path / "a.npz", "logits"), np.zeros((5, 3))
    )
    assert held == [True]
