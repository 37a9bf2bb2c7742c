"""The one reader of ``.npy`` files and ``.npz`` archive members.

Nothing read is ever unpickled. The header of a ``.npy`` stream is parsed
with numpy's own header readers and checked before anything is allocated:
the format version, the header size, the dtype (numbers, booleans or
strings; never objects, never structured records) and the declared size of
the data against the bytes actually present. An ``.npz`` member is also
refused, before it is inflated, when the archive's own sizes are impossible.
The data are then read as exactly the declared number of bytes. A damaged or
crafted file thus ends in a ``ValueError`` naming what is wrong, instead of a
misleading message, a huge allocation or a member inflating without bound.

Used by :mod:`sklearn_calib.chunked` (row ranges of large ``.npy`` files,
``.npz`` chunks) and by the command line (whole files); each problem has one
message, whichever reads the file.
"""

import math
import os
import threading
import zipfile
from typing import NamedTuple

import numpy as np

# numpy's own default limit on the header of a .npy file it reads.
_MAX_HEADER_SIZE = 10_000
# Deflate codes a match of at most 258 bytes in no fewer than 2 bits, so an
# honest deflated member expands at most 1032-fold (plus block headers); an
# archive claiming more lies about its sizes.
_MAX_DEFLATE_RATIO = 1032
_DEFLATE_SLACK = 4096
# Bytes read per call: keeps the temporaries of a decompressing read small.
_READ_CHUNK = 1 << 24

# numpy parses a header with ast.literal_eval, and CPython 3.11's AST
# constructor keeps one recursion counter per interpreter, not per thread:
# headers parsed at once in dask's threads failed with "SystemError: AST
# constructor recursion depth mismatch" (CI, Python 3.11.7; CPython issue
# gh-106905). A header is a few hundred bytes: parsing them one at a time
# costs nothing.
_HEADER_LOCK = threading.Lock()


class NpyHeader(NamedTuple):
    """What a checked ``.npy`` header declares.

    ``offset`` is the position of the data from the start of the ``.npy``
    stream (of the file, or of the archive member).
    """

    shape: tuple
    dtype: np.dtype
    fortran_order: bool
    offset: int


def describe_size(n_bytes):
    """``1234567`` -> ``'1.2 MB'``: a byte count as people read it."""
    value = float(n_bytes)
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if value < 1000 or unit == "PB":
            break
        value /= 1000
    return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"


def _shape_text(shape):
    return str(tuple(int(d) for d in shape))


def read_npy_header(fp, size, where, *, in_archive=False):
    """Parse and check the header of a ``.npy`` stream of ``size`` bytes.

    Parameters
    ----------
    fp : binary file object
        Positioned at the start of the ``.npy`` stream; on return it is
        positioned at the start of the data.
    size : int
        Bytes in the stream (the file size, or an archive member's size).
    where : str
        How messages name the stream (a path, or ``"path [key]"``).
    in_archive : bool, default=False
        Whether the stream is an ``.npz`` member (only changes how bytes
        after the data are explained).

    Returns
    -------
    header : NpyHeader

    Raises
    ------
    ValueError
        If the stream is too short, not a ``.npy`` stream, of an unknown
        format version, has a damaged header, holds objects or structured
        records, or if its size disagrees with the header.
    """
    from numpy.lib import format as npy_format

    if size < len(npy_format.MAGIC_PREFIX) + 4:
        raise ValueError(
            f"{where}: too short to be a .npy array ({size} bytes); it is empty "
            "or truncated"
        )
    try:
        version = npy_format.read_magic(fp)
    except ValueError as exc:
        raise ValueError(
            f"{where}: not a .npy array: it does not start with NumPy's magic "
            "string (write arrays with numpy.save)"
        ) from exc
    readers = {
        (1, 0): npy_format.read_array_header_1_0,
        (2, 0): npy_format.read_array_header_2_0,
    }
    if version not in readers:
        raise ValueError(
            f"{where}: .npy format version {version[0]}.{version[1]} is not read; "
            "numpy writes numeric arrays in versions 1.0 and 2.0"
        )
    try:
        with _HEADER_LOCK:
            shape, fortran_order, dtype = readers[version](
                fp, max_header_size=_MAX_HEADER_SIZE
            )
    except (ValueError, SyntaxError, TypeError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ValueError(f"{where}: damaged .npy header ({message})") from exc
    if dtype.hasobject:
        raise ValueError(
            f"{where}: holds an object array (pickled Python objects), which is "
            "never loaded; save a numeric array instead"
        )
    if dtype.names is not None or dtype.subdtype is not None or dtype.kind == "V":
        raise ValueError(
            f"{where}: holds a structured array (dtype {dtype}); save a plain "
            "numeric array instead"
        )
    if dtype.itemsize == 0 or any(d < 0 for d in shape):
        raise ValueError(
            f"{where}: damaged .npy header (shape {_shape_text(shape)}, dtype "
            f"{dtype.str})"
        )
    offset = fp.tell()
    # Python integers: the product of a crafted shape cannot overflow.
    n_bytes = math.prod(shape) * dtype.itemsize
    present = size - offset
    declared = f"shape {_shape_text(shape)} of {dtype.name}, {n_bytes:,} bytes of data"
    if n_bytes > present:
        raise ValueError(
            f"{where}: truncated or damaged: its header declares {declared}, but "
            f"only {present:,} bytes follow the header"
        )
    if n_bytes < present:
        raise ValueError(
            f"{where}: {present - n_bytes:,} unexpected bytes follow the data its "
            f"header declares ({declared}); "
            + (
                "a damaged or crafted archive"
                if in_archive
                else "several arrays saved into one file, or a damaged file"
            )
        )
    return NpyHeader(tuple(int(d) for d in shape), dtype, bool(fortran_order), offset)


def read_npy_data(fp, header, where):
    """Read the data of a checked header: exactly the declared bytes.

    ``fp`` is positioned at the start of the data (as
    :func:`read_npy_header` leaves it).
    """
    shape, dtype = header.shape, header.dtype
    n_items = math.prod(shape)
    try:
        flat = np.empty(n_items, dtype=dtype)
    except (MemoryError, ValueError) as exc:
        raise MemoryError(
            f"{where}: an array of shape {_shape_text(shape)} of {dtype.name} needs "
            f"{describe_size(n_items * dtype.itemsize)} of memory, more than is "
            "available"
        ) from exc
    view = memoryview(flat.view(np.uint8)) if n_items else memoryview(b"")
    done = 0
    while done < len(view):
        count = fp.readinto(view[done : done + _READ_CHUNK])
        if not count:
            raise ValueError(
                f"{where}: truncated: the data end after {done:,} of the "
                f"{len(view):,} bytes its header declares"
            )
        done += count
    if header.fortran_order:
        return flat.reshape(shape[::-1]).transpose()
    return flat.reshape(shape)


def npy_file_header(path):
    """The checked :class:`NpyHeader` of a ``.npy`` file, reading only the header."""
    with open(path, "rb") as fp:
        return read_npy_header(fp, os.fstat(fp.fileno()).st_size, str(path))


def read_npy(path):
    """The array of a ``.npy`` file, checked before any allocation."""
    where = str(path)
    with open(path, "rb") as fp:
        header = read_npy_header(fp, os.fstat(fp.fileno()).st_size, where)
        return read_npy_data(fp, header, where)


def npz_keys(path):
    """The array names of an ``.npz`` archive, read from its listing only.

    Raises
    ------
    ValueError
        If the file is not a zip archive, or holds two members of one name.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            names = [
                info.filename
                for info in archive.infolist()
                if info.filename.endswith(".npy")
            ]
    except zipfile.BadZipFile as exc:
        raise ValueError(
            f"{path}: not a .npz archive ({exc}); write one with numpy.savez"
        ) from exc
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(
            f"{path}: the archive holds several members named "
            f"{', '.join(repeated)}; which to read is ambiguous"
        )
    return [name[: -len(".npy")] for name in names]


def _check_member_sizes(info, where):
    """Refuse a member whose stated sizes no honest archive can have."""
    if info.flag_bits & 0x1:
        raise ValueError(f"{where}: the member is encrypted")
    if info.compress_type == zipfile.ZIP_STORED:
        if info.compress_size != info.file_size:
            raise ValueError(
                f"{where}: damaged archive: a stored member of {info.file_size:,} "
                f"bytes occupies {info.compress_size:,}"
            )
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        if info.file_size > _MAX_DEFLATE_RATIO * info.compress_size + _DEFLATE_SLACK:
            raise ValueError(
                f"{where}: the archive says this member expands from "
                f"{info.compress_size:,} to {info.file_size:,} bytes, more than "
                f"deflate can (at most {_MAX_DEFLATE_RATIO}-fold): a damaged or "
                "crafted file"
            )
    else:
        raise ValueError(
            f"{where}: compressed with zip method {info.compress_type}; numpy "
            "writes stored or deflated members only"
        )


def _read_member(path, key, *, data):
    where = f"{path} [{key}]"
    with zipfile.ZipFile(path) as archive:
        try:
            info = archive.getinfo(f"{key}.npy")
        except KeyError:
            raise KeyError(key) from None
        _check_member_sizes(info, where)
        with archive.open(info) as fp:
            header = read_npy_header(fp, info.file_size, where, in_archive=True)
            return read_npy_data(fp, header, where) if data else header


def npz_member_header(path, key):
    """The checked :class:`NpyHeader` of member ``key`` of an ``.npz`` archive.

    Only the start of the member is inflated. Raises ``KeyError`` when the
    archive has no such member; ``zipfile.BadZipFile``, ``zlib.error`` or
    ``EOFError`` when the archive is damaged.
    """
    return _read_member(path, key, data=False)


def read_npz_member(path, key):
    """The array of member ``key`` of an ``.npz`` archive, checked first.

    Never inflates more than the member's declared size; see
    :func:`npz_member_header` for the errors.
    """
    return _read_member(path, key, data=True)
