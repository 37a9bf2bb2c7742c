"""Out-of-core machinery: data in chunks, read a few times, never whole.

- :mod:`.sources`: dask, zarr and memmap arrays and iterables of chunks, all
  behind one operation, ``reduce(func, combine)``.
- :mod:`.graph`: the dask graph of one such reduction.
- :mod:`.first_pass`: the pass that starts every chunked fit (validation,
  labels, weights) and the encoded chunks it hands to the calibrator.
- :mod:`.quantiles`: exact equal-mass quantiles of scores in chunks.

Each calibrator's own chunked fit lives beside its in-memory fit; the public
entry points are :meth:`sklearn_calib.BaseCalibrator.fit_chunks` and
:mod:`sklearn_calib.chunked`.
"""
