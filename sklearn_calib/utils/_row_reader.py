"""A read-only view of an array that dask reads by slices, never copies.

``dask.array.from_array`` copies any array-like that has a ``copy`` method
(dask 2026.8: ``if is_arraylike(x) and hasattr(x, "copy"): x = x.copy()``),
``np.memmap`` and in-memory label arrays included: a fit from a memmap read
the whole file into anonymous memory before its first pass. ``RowReader``
has a shape, a dtype and ``__getitem__`` only (no ``copy``, no
``__array__``), so dask's tasks read it slice by slice: each task holds one
chunk, and the pages of a memmap stay file-backed.
"""

import numpy as np


class RowReader:
    """Slices of ``array`` as numpy arrays; nothing else.

    Parameters
    ----------
    array : numpy array, memmap or any array with numpy slicing
    """

    def __init__(self, array):
        self._array = array
        self.shape = tuple(array.shape)
        self.dtype = np.dtype(array.dtype)
        self.ndim = len(self.shape)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        return np.asarray(self._array[key])

    def __repr__(self):
        return f"RowReader(shape={self.shape}, dtype={self.dtype})"
