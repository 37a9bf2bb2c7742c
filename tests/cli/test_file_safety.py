"""Damaged and crafted .npy/.npz files: a precise message, bounded memory, no pickle.

The reader is checked against ``numpy.load`` on honest files of every layout
(an independent reference), and on crafted ones against what the file really
holds: truncated data, a header declaring more than the file holds (up to
10^12 elements), archive members that inflate past their declared shape, and
archives that lie about their own sizes.
"""

import ast
import io
import pickle
import struct
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from sklearn_calib import cli
from sklearn_calib.cli import _io

from .conftest import assert_usage_error

MB = 1_000_000


def npy_bytes(array, version=None):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asanyarray(array), version=version)
    return buffer.getvalue()


def npy_header(shape, descr="<f8", fortran_order=False):
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": descr, "fortran_order": fortran_order, "shape": shape}
    )
    return buffer.getvalue()


def write_zip(path, members):
    """A deflated zip of ``name -> iterable of byte chunks``, streamed."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, chunks in members.items():
            with archive.open(name, "w") as fp:
                for chunk in chunks:
                    fp.write(chunk)
    return path


def patch_stated_size(path, file_size):
    """Make a one-member zip's central directory state another uncompressed size.

    zipfile reads a member's sizes from the central directory: offset 24 of
    the entry is the uncompressed size.
    """
    data = bytearray(Path(path).read_bytes())
    entry = data.rindex(b"PK\x01\x02")
    struct.pack_into("<I", data, entry + 24, file_size)
    Path(path).write_bytes(bytes(data))


def zeros(n_bytes, chunk=4 * MB):
    block = bytes(chunk)
    for start in range(0, n_bytes, chunk):
        yield block[: min(chunk, n_bytes - start)]


def peak_memory(function):
    """(peak bytes allocated while calling ``function``, its CommandError)."""
    tracemalloc.start()
    try:
        with pytest.raises(cli.CommandError) as error:
            function()
        return tracemalloc.get_traced_memory()[1], str(error.value)
    finally:
        tracemalloc.stop()


def read_member(path, key="logits"):
    return _io.read_arrays(path)[key]


# --- honest files read exactly as numpy.load reads them -----------------------


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12.0).reshape(3, 4),
        np.asfortranarray(np.arange(12.0, dtype=np.float32).reshape(3, 4)),
        np.arange(12, dtype=">f8").reshape(4, 3),
        np.array(["ant", "bee", "cat"]),
        np.array([True, False]),
        np.arange(5, dtype=np.int16),
        np.zeros((0, 3)),
    ],
    ids=[
        "float64",
        "fortran_float32",
        "big_endian",
        "strings",
        "bool",
        "int16",
        "empty",
    ],
)
@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_honest_npy_and_npz_read_as_numpy_reads_them(tmp_path, array, version):
    (tmp_path / "a.npy").write_bytes(npy_bytes(array, version))
    expected = np.load(tmp_path / "a.npy", allow_pickle=False)
    got = _io.read_npy(tmp_path / "a.npy")
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    np.savez_compressed(tmp_path / "a.npz", logits=array, other=np.ones(3))
    got = read_member(tmp_path / "a.npz")
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_highly_compressible_honest_member_is_read(tmp_path):
    # Constant data (a masked block of -inf, zeros) deflates about 1000-fold,
    # close to deflate's limit: the bound on expansion must accept it.
    logits = np.zeros((1000, 1000))
    logits[:, 500:] = -np.inf
    np.savez_compressed(tmp_path / "z.npz", logits=logits)
    with zipfile.ZipFile(tmp_path / "z.npz") as archive:
        info = archive.getinfo("logits.npy")
    assert info.file_size > 500 * info.compress_size
    np.testing.assert_array_equal(read_member(tmp_path / "z.npz"), logits)


# --- damaged .npy ---------------------------------------------------------------


def damaged_npy(case):
    good = npy_bytes(np.arange(400.0).reshape(100, 4))
    return {
        "truncated_data": good[:-10],
        "truncated_header": good[:40],
        "too_short": good[:5],
        "not_npy": b"this is not an array file at all",
        "declares_1e12": npy_header((10**6, 10**6)) + bytes(64),
        "extra_bytes": good + good,
        "object": npy_header((2,), descr="|O") + pickle.dumps(["a", "b"]),
        "structured": npy_header((2,), descr=[("a", "<f8"), ("b", "<i4")]) + bytes(24),
        "bad_version": b"\x93NUMPY\x09\x00" + good[8:],
        "damaged_header": good.replace(
            b"'fortran_order': False", b"'fortran_order': Flase"
        ),
    }[case]


@pytest.mark.parametrize(
    "case, fragments",
    [
        (
            "truncated_data",
            ["truncated", "shape (100, 4) of float64", "3,200 bytes", "3,190 bytes"],
        ),
        ("truncated_header", ["damaged .npy header"]),
        ("too_short", ["too short to be a .npy array (5 bytes)"]),
        ("not_npy", ["not a .npy array"]),
        (
            "declares_1e12",
            ["truncated", "(1000000, 1000000)", "8,000,000,000,000 bytes", "only 64"],
        ),
        ("extra_bytes", ["unexpected bytes follow", "several arrays"]),
        ("object", ["object array (pickled Python objects)", "never loaded"]),
        ("structured", ["structured array"]),
        ("bad_version", ["format version 9.0"]),
        ("damaged_header", ["damaged .npy header"]),
    ],
)
def test_damaged_npy_says_what_is_wrong(capsys, tmp_path, case, fragments):
    path = tmp_path / "l.npy"
    path.write_bytes(damaged_npy(case))
    np.save(tmp_path / "y.npy", np.zeros(100, dtype=int))
    line = assert_usage_error(
        capsys, ["report", path, "--labels", tmp_path / "y.npy"], *fragments
    )
    if case != "object":
        assert "object array" not in line and "pickled" not in line


def test_header_of_1e12_elements_allocates_nothing(tmp_path):
    path = tmp_path / "huge.npy"
    path.write_bytes(npy_header((10**12,)) + bytes(800))
    peak, message = peak_memory(lambda: _io.read_npy(path))
    assert "8,000,000,000,000 bytes" in message
    assert peak < 1 * MB


# --- crafted .npz members ---------------------------------------------------------


def test_member_inflating_past_its_declared_shape(capsys, tmp_path):
    # The header declares 3 x 4 float64 (96 bytes); the member inflates to
    # 30 MB of zeros, honestly stated in the archive.
    header = npy_header((3, 4))
    path = write_zip(
        tmp_path / "bomb.npz",
        {
            "logits.npy": [header, bytes(96), *zeros(30 * MB)],
            "y.npy": [npy_bytes([0, 1, 0])],
        },
    )
    peak, message = peak_memory(lambda: read_member(path))
    assert "unexpected bytes follow" in message and "shape (3, 4)" in message
    assert "crafted archive" in message
    assert peak < 2 * MB
    assert_usage_error(
        capsys, ["report", path], "bomb.npz [logits]", "unexpected bytes"
    )


def test_member_whose_archive_understates_its_size(capsys, tmp_path):
    # The central directory says 96 bytes of data, as the header does, but
    # the stream inflates to 30 MB: never more than the stated size is
    # inflated, and the checksum then shows the lie.
    header = npy_header((3, 4))
    path = write_zip(tmp_path / "lie.npz", {"logits.npy": [header, *zeros(30 * MB)]})
    patch_stated_size(path, len(header) + 96)
    peak, message = peak_memory(lambda: read_member(path))
    assert "damaged archive member" in message and "CRC" in message
    assert peak < 2 * MB


def test_member_declaring_a_huge_shape(capsys, tmp_path):
    # The header declares 10^12 elements; the member holds 96 bytes.
    path = write_zip(
        tmp_path / "huge.npz", {"logits.npy": [npy_header((10**6, 10**6)), bytes(96)]}
    )
    peak, message = peak_memory(lambda: read_member(path))
    assert "truncated" in message and "8,000,000,000,000 bytes" in message
    assert peak < 1 * MB


def test_member_whose_archive_claims_an_impossible_expansion(capsys, tmp_path):
    # Header and central directory agree on 3.9 GB, from a few hundred
    # compressed bytes: more than deflate can expand to, refused before any
    # allocation or inflation.
    shape = (487_500_000,)
    header = npy_header(shape)
    path = write_zip(tmp_path / "claim.npz", {"logits.npy": [header, bytes(96)]})
    patch_stated_size(path, len(header) + 8 * shape[0])
    peak, message = peak_memory(lambda: read_member(path))
    assert "more than deflate can" in message
    assert f"{len(header) + 8 * shape[0]:,} bytes" in message
    assert peak < 1 * MB
    assert_usage_error(capsys, ["report", path], "claim.npz [logits]", "crafted")


def test_only_the_members_a_command_needs_are_read(capsys, tmp_path, logits_y):
    logits, y = logits_y
    features = np.zeros((6000, 1000))  # 48 MB, deflates to about 50 kB
    np.savez_compressed(tmp_path / "big.npz", logits=logits, y=y, features=features)
    tracemalloc.start()
    try:
        splits = cli.read_splits(tmp_path / "big.npz")
        new_logits = cli.read_logits_only(tmp_path / "big.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(splits["val"].logits, logits)
    np.testing.assert_array_equal(splits["val"].y, y)
    np.testing.assert_array_equal(new_logits, logits)
    assert peak < 2 * MB


def test_other_archive_damage(capsys, tmp_path):
    (tmp_path / "nz.npz").write_bytes(b"PK not really a zip")
    assert_usage_error(capsys, ["report", tmp_path / "nz.npz"], "not a .npz archive")
    with zipfile.ZipFile(tmp_path / "dup.npz", "w") as archive:
        with pytest.warns(UserWarning, match="Duplicate name"):
            archive.writestr("logits.npy", npy_bytes(np.zeros((2, 2))))
            archive.writestr("logits.npy", npy_bytes(np.ones((2, 2))))
    assert_usage_error(
        capsys, ["report", tmp_path / "dup.npz"], "several members named logits.npy"
    )
    with zipfile.ZipFile(tmp_path / "bz.npz", "w", zipfile.ZIP_BZIP2) as archive:
        archive.writestr("logits.npy", npy_bytes(np.zeros((2, 2))))
    assert_usage_error(capsys, ["report", tmp_path / "bz.npz"], "zip method 12")


# --- nothing is ever unpickled ----------------------------------------------------


def test_object_arrays_are_refused_without_unpickling(capsys, tmp_path, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the command line unpickled a file")

    np.save(
        tmp_path / "o.npy", np.array([[1.0, None]], dtype=object), allow_pickle=True
    )
    np.savez(tmp_path / "o.npz", logits=np.array([[1.0, "a"]], dtype=object), y=[0])
    # An object member nobody asked for is not even looked at.
    np.savez(
        tmp_path / "ok.npz",
        logits=np.zeros((4, 2)),
        y=[0, 1, 0, 1],
        notes=np.array([{"a": 1}], dtype=object),
    )
    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    assert_usage_error(capsys, ["report", tmp_path / "o.npy"], "object array")
    assert_usage_error(
        capsys, ["report", tmp_path / "o.npz"], "o.npz [logits]", "object"
    )
    assert cli.read_splits(tmp_path / "ok.npz")["val"].logits.shape == (4, 2)


def test_every_load_in_the_package_refuses_pickles():
    """Every ``load`` call of the package refuses pickles; nothing imports pickle."""
    # The whole package: the command line reads .pt files through the torch
    # layer and .npy/.npz files through utils.
    package = Path(cli.__file__).parents[1]
    safe = {"allow_pickle": False, "weights_only": True}
    loads = 0
    for source in sorted(package.rglob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", "")]
                assert not any("pickle" in (n or "") for n in names), source.name
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name not in ("load", "loads", "read_pickle"):
                continue
            loads += 1
            keywords = {k.arg: k.value for k in node.keywords}
            ok = "trusted" in keywords or any(
                isinstance(keywords.get(k), ast.Constant) and keywords[k].value is v
                for k, v in safe.items()
            )
            assert ok, f"{source.name}:{node.lineno}: {ast.unparse(node)}"
    assert loads >= 3  # torch.load, skops's load and the bundled sets' np.load
