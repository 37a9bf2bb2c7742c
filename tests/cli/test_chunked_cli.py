"""``fit``, ``apply`` and ``report`` on folders of chunks and zarr stores.

Each result is checked against the same command on the same data held in one
file (the in-memory path): the same temperature, the same probabilities, the
same report values.
"""

import io
import json
import sys

import numpy as np
import pytest

from sklearn_calib import cli
from sklearn_calib.utils._testing import make_logits

from .conftest import assert_usage_error, call

# Uneven chunks, one of a single row.
SIZES = (120, 1, 130, 49)
N_VAL = 300


@pytest.fixture(scope="module")
def data():
    logits, y = make_logits(n_samples=2 * N_VAL, n_classes=4, seed=3)
    return logits[:N_VAL], y[:N_VAL], logits[N_VAL:], y[N_VAL:]


def _bounds():
    edges = np.cumsum((0,) + SIZES)
    return list(zip(edges[:-1], edges[1:], strict=True))


def write_npz_chunks(folder, logits, y, *, keys=("logits", "y")):
    folder.mkdir(parents=True)
    for i, (a, b) in enumerate(_bounds()):
        np.savez(folder / f"part{i:03d}.npz", **{keys[0]: logits[a:b], keys[1]: y[a:b]})
    return folder


def write_npy_pair(folder, logits, y):
    folder.mkdir(parents=True)
    np.save(folder / "logits.npy", logits)
    np.save(folder / "y.npy", y)
    return folder


def write_numbered_npy(folder, logits, y):
    folder.mkdir(parents=True)
    for i, (a, b) in enumerate(_bounds()):
        np.save(folder / f"logits_{i:03d}.npy", logits[a:b])
        np.save(folder / f"y_{i:03d}.npy", y[a:b])
    return folder


def write_zarr(folder, arrays):
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(folder), mode="w")
    for name, array in arrays.items():
        group.create_array(name, data=array, chunks=(64,) + array.shape[1:])
    return folder


def one_split(kind, folder, logits, y):
    if kind == "npz":
        return write_npz_chunks(folder, logits, y)
    if kind == "npy":
        return write_npy_pair(folder, logits, y)
    if kind == "numbered":
        return write_numbered_npy(folder, logits, y)
    return write_zarr(folder, {"logits": logits, "y": y})


LAYOUTS = ("npz", "npy", "numbered", "zarr")


def fitted_temperature(path):
    return float(cli.load_calibrator(path).temperature_)


@pytest.mark.parametrize("kind", LAYOUTS)
def test_fit_and_apply_equal_the_in_memory_commands(tmp_path, capsys, data, kind):
    X_val, y_val, X_test, y_test = data
    folder = one_split(kind, tmp_path / "val", X_val, y_val)
    np.savez(tmp_path / "val.npz", logits=X_val, y=y_val)

    status, out, err = call(
        capsys, "fit", "--method", "temperature", "--logits", folder,
        "-o", tmp_path / "chunks.skops",
    )  # fmt: skip
    assert status == 0, err
    assert "chunks)" in out
    status, _, err = call(
        capsys, "fit", "--method", "temperature", "--logits", tmp_path / "val.npz",
        "-o", tmp_path / "memory.skops",
    )  # fmt: skip
    assert status == 0, err
    t_chunks = fitted_temperature(tmp_path / "chunks.skops")
    t_memory = fitted_temperature(tmp_path / "memory.skops")
    assert t_chunks == pytest.approx(t_memory, rel=1e-10)
    assert t_chunks != pytest.approx(1.0, abs=1e-3)  # a real fit

    # Calibrate test logits stored in the same layout, without labels for .npy.
    test_folder = one_split(kind, tmp_path / "test", X_test, y_test)
    np.save(tmp_path / "test_logits.npy", X_test)
    sources = (test_folder, tmp_path / "test_logits.npy")
    for source, output in zip(sources, ("p_chunks.npy", "p_memory.npy"), strict=True):
        status, _, err = call(
            capsys, "apply", tmp_path / "memory.skops", "--logits", source,
            "-o", tmp_path / output,
        )  # fmt: skip
        assert status == 0, err
    np.testing.assert_array_equal(
        np.load(tmp_path / "p_chunks.npy"), np.load(tmp_path / "p_memory.npy")
    )


def test_apply_reads_unlabelled_chunks_and_logits_test(tmp_path, capsys, data):
    X_val, y_val, X_test, _ = data
    np.savez(tmp_path / "val.npz", logits=X_val, y=y_val)
    call(capsys, "fit", "--method", "temperature", "--logits", tmp_path / "val.npz",
         "-o", tmp_path / "ts.skops")  # fmt: skip
    expected = cli.load_calibrator(tmp_path / "ts.skops").predict_proba(X_test)

    unlabelled = tmp_path / "unlabelled"
    unlabelled.mkdir()
    np.save(unlabelled / "logits.npy", X_test)
    keyed = tmp_path / "keyed"
    keyed.mkdir()
    for i, (a, b) in enumerate(_bounds()):
        np.savez(keyed / f"c{i}.npz", logits_test=X_test[a:b])
    for i, source in enumerate((unlabelled, keyed)):
        out_path = tmp_path / f"p{i}.npy"
        status, _, err = call(
            capsys, "apply", tmp_path / "ts.skops", "--logits", source, "-o", out_path
        )
        assert status == 0, err
        np.testing.assert_allclose(np.load(out_path), expected, rtol=1e-12, atol=0)


def test_fit_from_the_val_split_of_a_two_split_folder(tmp_path, capsys, data):
    X_val, y_val, X_test, y_test = data
    arrays = {"logits_val": X_val, "y_val": y_val}
    arrays.update(logits_test=X_test, y_test=y_test)
    np.savez(tmp_path / "two.npz", **arrays)
    folder = tmp_path / "two"
    folder.mkdir()
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array)
    for source, output in ((folder, "a.skops"), (tmp_path / "two.npz", "b.skops")):
        status, _, err = call(
            capsys, "fit", "--method", "temperature", "--logits", source,
            "-o", tmp_path / output,
        )  # fmt: skip
        assert status == 0, err
    assert fitted_temperature(tmp_path / "a.skops") == pytest.approx(
        fitted_temperature(tmp_path / "b.skops"), rel=1e-10
    )


def test_fit_errors(tmp_path, capsys, data):
    X_val, y_val, _, _ = data
    folder = write_npz_chunks(tmp_path / "val", X_val, y_val)
    # No chunked fit: the library's own message, on one line.
    assert_usage_error(
        capsys,
        ["fit", "--method", "MatrixScaling", "--logits", folder,
         "-o", tmp_path / "m.skops"],
        "MatrixScaling cannot be fitted from chunks",
    )  # fmt: skip
    assert not (tmp_path / "m.skops").exists()
    np.save(tmp_path / "y.npy", y_val)
    assert_usage_error(
        capsys,
        ["fit", "--method", "temperature", "--logits", folder,
         "--labels", tmp_path / "y.npy", "-o", tmp_path / "t.skops"],
        "--labels is not read with a folder of chunks",
    )  # fmt: skip
    unlabelled = tmp_path / "unlabelled"
    unlabelled.mkdir()
    np.savez(unlabelled / "c.npz", logits=X_val)
    assert_usage_error(
        capsys,
        ["fit", "--method", "temperature", "--logits", unlabelled,
         "-o", tmp_path / "t.skops"],
        "no labels",
    )  # fmt: skip
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_usage_error(
        capsys,
        ["fit", "--method", "temperature", "--logits", empty,
         "-o", tmp_path / "t.skops"],
        "no logits found",
    )  # fmt: skip
    assert_usage_error(
        capsys,
        ["fit", "--method", "temperature", "--logits", folder,
         "-o", folder / "t.skops"],
        "refusing to write inside the input folder",
    )  # fmt: skip


def test_apply_output_rules(tmp_path, capsys, data):
    X_val, y_val, X_test, y_test = data
    np.savez(tmp_path / "val.npz", logits=X_val, y=y_val)
    call(capsys, "fit", "--method", "temperature", "--logits", tmp_path / "val.npz",
         "-o", tmp_path / "ts.skops")  # fmt: skip
    folder = write_npz_chunks(tmp_path / "test", X_test, y_test)
    args = ["apply", tmp_path / "ts.skops", "--logits", folder, "-o"]
    assert_usage_error(
        capsys, args + [tmp_path / "p.csv"], "into a .npy file", "'.csv'"
    )
    assert not (tmp_path / "p.csv").exists()
    assert_usage_error(
        capsys, args + [folder / "p.npy"], "refusing to write inside the input folder"
    )
    target = tmp_path / "p.npy"
    target.write_bytes(b"keep me")
    assert_usage_error(capsys, args + [target], "already exists", "--overwrite")
    assert target.read_bytes() == b"keep me"
    status, _, err = call(capsys, *args, target, "--overwrite")
    assert status == 0, err
    assert np.load(target).shape == (N_VAL, 4)
    # The temporary file is gone, nothing else was written.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "p.npy", "test", "ts.skops", "val.npz",
    ]  # fmt: skip


def _two_split_folders(tmp_path, data):
    X_val, y_val, X_test, y_test = data
    np.savez(
        tmp_path / "two.npz", logits_val=X_val, y_val=y_val, logits_test=X_test,
        y_test=y_test,
    )  # fmt: skip
    subfolders = tmp_path / "sub"
    write_npz_chunks(subfolders / "val", X_val, y_val)
    write_npy_pair(subfolders / "test", X_test, y_test)
    keyed = tmp_path / "keyed"
    keyed.mkdir()
    test_edges = np.cumsum((0,) + SIZES[::-1])
    test_bounds = zip(test_edges[:-1], test_edges[1:], strict=True)
    for i, ((a, b), (c, d)) in enumerate(zip(_bounds(), test_bounds, strict=True)):
        # Val and test chunks of different sizes in the same archives.
        np.savez(
            keyed / f"c{i}.npz", logits_val=X_val[a:b], y_val=y_val[a:b],
            logits_test=X_test[c:d], y_test=y_test[c:d],
        )  # fmt: skip
    return tmp_path / "two.npz", subfolders, keyed


def test_report_equals_the_in_memory_report(tmp_path, capsys, data):
    two, subfolders, keyed = _two_split_folders(tmp_path, data)
    methods = ["--methods", "temperature,histogram,matrix"]
    status, out, err = call(capsys, "report", two, *methods, "--format", "json")
    assert status == 0, err
    memory = {r["method"]: r for r in json.loads(out)["results"]}
    for folder in (subfolders, keyed):
        status, out, err = call(capsys, "report", folder, *methods, "--format", "json")
        assert status == 0, err
        report = json.loads(out)
        assert (report["n_samples_val"], report["n_samples_test"]) == (N_VAL, N_VAL)
        assert "smooth ECE" in report["not_computed"]
        rows = {r["method"]: r for r in report["results"]}
        for name in ("Uncalibrated", "TemperatureScaling", "HistogramBinning"):
            for key in ("ece", "adaptive_ece", "classwise_ece", "nll", "brier"):
                assert rows[name][key] == pytest.approx(memory[name][key], rel=1e-10)
            assert rows[name]["accuracy"] == memory[name]["accuracy"]
        assert rows["MatrixScaling"]["ece"] is None
        assert "no fit from chunks" in rows["MatrixScaling"]["note"]
        assert memory["MatrixScaling"]["ece"] is not None


def test_report_zarr_store(tmp_path, capsys, data):
    X_val, y_val, X_test, y_test = data
    store = write_zarr(
        tmp_path / "two.zarr",
        {"logits_val": X_val, "y_val": y_val, "logits_test": X_test, "y_test": y_test},
    )
    np.savez(
        tmp_path / "two.npz", logits_val=X_val, y_val=y_val, logits_test=X_test,
        y_test=y_test,
    )  # fmt: skip
    results = []
    for source in (store, tmp_path / "two.npz"):
        status, out, err = call(
            capsys, "report", source, "--methods", "temperature", "--format", "json"
        )
        assert status == 0, err
        results.append({r["method"]: r for r in json.loads(out)["results"]})
    for name in ("Uncalibrated", "TemperatureScaling"):
        assert results[0][name]["ece"] == pytest.approx(
            results[1][name]["ece"], rel=1e-10
        )
        assert results[0][name]["nll"] == pytest.approx(
            results[1][name]["nll"], rel=1e-10
        )


def test_report_formats_say_what_is_not_computed(tmp_path, capsys, data):
    _, subfolders, _ = _two_split_folders(tmp_path, data)
    for fmt in ("table", "markdown"):
        status, out, _ = call(
            capsys, "report", subfolders, "--methods", "temperature", "--format", fmt
        )
        assert status == 0
        assert "not computed: smooth ECE and prediction sets" in out
        assert "TemperatureScaling" in out
    status, out, err = call(
        capsys, "report", subfolders, "--methods", "temperature", "--format", "csv"
    )
    assert status == 0
    assert out.splitlines()[0].startswith("method,ece,adaptive_ece")
    assert "not computed: smooth ECE" in err


def test_report_errors(tmp_path, capsys, data):
    X_val, y_val, _, _ = data
    _, subfolders, _ = _two_split_folders(tmp_path, data)
    assert_usage_error(
        capsys, ["report", subfolders, "--out", tmp_path / "out"],
        "--out", "not available for a folder of chunks",
    )  # fmt: skip
    assert not (tmp_path / "out").exists()
    one = write_npz_chunks(tmp_path / "one", X_val, y_val)
    assert_usage_error(
        capsys, ["report", one], "needs a val and a test split",
        "cross-validation is not run over chunks",
    )  # fmt: skip


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_only_on_a_terminal(tmp_path, capsys, monkeypatch, data):
    X_val, y_val, _, _ = data
    folder = write_npz_chunks(tmp_path / "val", X_val, y_val)
    args = ["fit", "--method", "temperature", "--logits", str(folder), "-o"]
    status, _, err = call(capsys, *args, tmp_path / "a.skops")
    assert status == 0
    assert err == ""  # piped: no bar
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.main(args + [str(tmp_path / "b.skops")]) == 0
    drawn = terminal.getvalue()
    n_chunks = len(SIZES)
    assert f"] {n_chunks}/{n_chunks} fitting data pass 1" in drawn
    # A temperature fit reads the data several times.
    assert "pass 2" in drawn
    assert drawn.endswith("\r")  # the line is cleared at the end
