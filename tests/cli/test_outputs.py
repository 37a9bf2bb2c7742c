"""Outputs: written where asked, never over an input, over a file only on request.

A refused run exits with status 2 and one line on stderr, prints nothing on
stdout and leaves every file as it was.
"""

import errno
import os

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling

from .conftest import call, reference_proba, run_cli


@pytest.fixture
def fitted(tmp_path, logits_y):
    """A saved calibrator, its logits file and labels file, in ``tmp_path``."""
    skops_io = pytest.importorskip("skops.io")
    logits, y = logits_y
    skops_io.dump(
        TemperatureScaling(device="cpu").fit(logits, y), tmp_path / "ts.skops"
    )
    np.save(tmp_path / "l.npy", logits)
    np.save(tmp_path / "y.npy", y)
    return tmp_path / "ts.skops", tmp_path / "l.npy", tmp_path / "y.npy"


def snapshot(folder):
    """Every file under ``folder`` with its bytes."""
    return {
        path.relative_to(folder): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def assert_refused(capsys, args, folder, *fragments):
    """Status 2, one line naming the problem, nothing on stdout, no file changed."""
    before = snapshot(folder)
    status, out, err = call(capsys, *args)
    assert status == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert snapshot(folder) == before
    return lines[0]


@pytest.mark.parametrize("name", ["P.NPY", "P.Npz", "P.CSV"])
def test_apply_writes_exactly_the_path_given_in_any_case(
    capsys, tmp_path, logits_y, fitted, name
):
    calibrator, logits_file, _ = fitted
    logits, y = logits_y
    before = set(os.listdir(tmp_path))
    status, out, err = call(
        capsys, "apply", calibrator, "--logits", logits_file, "-o", tmp_path / name
    )
    assert status == 0, err
    assert set(os.listdir(tmp_path)) - before == {name}
    assert out.strip().endswith(f"calibrated probabilities to {tmp_path / name}")
    expected = reference_proba(logits, y, logits)
    if name.endswith("NPY"):
        proba = np.load(tmp_path / name, allow_pickle=False)
    elif name.endswith("Npz"):
        with np.load(tmp_path / name, allow_pickle=False) as archive:
            proba = archive["proba"]
    else:
        import pandas as pd

        proba = pd.read_csv(tmp_path / name).to_numpy()
    np.testing.assert_allclose(proba, expected, rtol=1e-10)


def test_new_outputs_get_the_users_default_permissions(capsys, tmp_path, fitted):
    calibrator, logits_file, _ = fitted
    status, _, err = call(
        capsys, "apply", calibrator, "--logits", logits_file, "-o", tmp_path / "p.npy"
    )
    assert status == 0, err
    umask = os.umask(0o022)
    os.umask(umask)
    assert (tmp_path / "p.npy").stat().st_mode & 0o777 == 0o666 & ~umask


def test_fit_replaces_an_existing_file_only_with_overwrite(capsys, tmp_path, fitted):
    _, logits_file, labels_file = fitted
    output = tmp_path / "c.skops"
    output.write_bytes(b"a file the user cares about")
    args = ["fit", "--method", "TemperatureScaling", "--logits", logits_file]
    args += ["--labels", labels_file, "-o", output]
    assert_refused(capsys, args, tmp_path, "c.skops: already exists", "--overwrite")
    status, _, err = call(capsys, *args, "--overwrite")
    assert status == 0, err
    from sklearn_calib.cli import load_calibrator

    assert isinstance(load_calibrator(output), TemperatureScaling)


def test_apply_replaces_an_existing_file_only_with_overwrite(capsys, tmp_path, fitted):
    calibrator, logits_file, _ = fitted
    output = tmp_path / "p.csv"
    output.write_text("precious\n")
    args = ["apply", calibrator, "--logits", logits_file, "-o", output]
    assert_refused(capsys, args, tmp_path, "p.csv: already exists", "--overwrite")
    status, _, err = call(capsys, *args, "--overwrite")
    assert status == 0, err
    assert output.read_text().splitlines()[0] == "0,1,2,3"


@pytest.mark.parametrize(
    "case",
    [
        "apply_onto_its_logits",
        "apply_onto_its_logits_spelled_otherwise",
        "apply_onto_a_link_to_its_logits",
        "apply_onto_its_calibrator",
        "fit_onto_its_logits",
        "fit_onto_its_labels",
    ],
)
def test_an_input_is_never_overwritten(capsys, tmp_path, fitted, logits_y, case):
    calibrator, logits_file, labels_file = fitted
    (tmp_path / "sub").mkdir()
    if case.startswith("apply"):
        target = {
            "apply_onto_its_logits": logits_file,
            "apply_onto_its_logits_spelled_otherwise": tmp_path
            / "sub"
            / ".."
            / "l.npy",
            "apply_onto_a_link_to_its_logits": tmp_path / "link.npy",
            "apply_onto_its_calibrator": tmp_path / "ts.npz",
        }[case]
        if case == "apply_onto_a_link_to_its_logits":
            target.symlink_to(logits_file)
        if case == "apply_onto_its_calibrator":
            # A saved calibrator may have any name, .npz included.
            calibrator = calibrator.rename(tmp_path / "ts.npz")
        args = ["apply", calibrator, "--logits", logits_file, "-o", target]
    else:
        logits, y = logits_y
        np.savez(tmp_path / "data.npz", logits=logits)
        source = tmp_path / "data.npz"
        target = source if case == "fit_onto_its_logits" else labels_file
        args = ["fit", "--method", "temp", "--logits", source]
        args += ["--labels", labels_file, "-o", target]
    assert_refused(
        capsys, [*args, "--overwrite"], tmp_path, "refusing to write over an input"
    )


def test_fit_checks_the_output_folder_before_fitting(capsys, tmp_path, fitted):
    _, logits_file, labels_file = fitted
    args = ["fit", "--method", "temp", "--logits", logits_file, "--labels"]
    args += [labels_file, "-o", tmp_path / "missing" / "c.skops"]
    assert_refused(capsys, args, tmp_path, "the folder", "does not exist")
    args[-1] = tmp_path / "sub"
    (tmp_path / "sub").mkdir()
    assert_refused(capsys, args, tmp_path, "is a directory")


def test_a_failed_write_leaves_the_old_file_and_no_debris(
    capsys, tmp_path, fitted, monkeypatch
):
    calibrator, logits_file, _ = fitted
    output = tmp_path / "p.npy"
    np.save(output, np.zeros(3))

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", disk_full)
    args = ["apply", calibrator, "--logits", logits_file, "-o", output, "--overwrite"]
    assert_refused(capsys, args, tmp_path, "p.npy: cannot write", "No space left")


# --- report --out -------------------------------------------------------------------


def test_report_out_replaces_files_only_with_overwrite(
    capsys, tmp_path, npz_two_splits
):
    pytest.importorskip("matplotlib")
    out_dir = tmp_path / "report"
    out_dir.mkdir()
    (out_dir / "results.csv").write_text("results of last week\n")
    args = ["report", npz_two_splits, "--methods", "temp", "--out", out_dir]
    assert_refused(capsys, args, tmp_path, "results.csv: already exists", "--overwrite")
    status, _, err = call(capsys, *args, "--overwrite")
    assert status == 0, err
    assert sorted(os.listdir(out_dir)) == [
        "reliability_temperaturescaling.png",
        "reliability_uncalibrated.png",
        "report.html",
        "results.csv",
        "results.json",
    ]
    assert (out_dir / "results.csv").read_text().startswith("method,ece,")


def test_report_out_never_replaces_its_input(capsys, tmp_path, logits_y):
    pytest.importorskip("matplotlib")
    import pandas as pd

    logits, y = logits_y
    frame = pd.DataFrame(logits, columns=list("abcd"))
    frame["y"] = y
    frame.to_csv(tmp_path / "results.csv", index=False)
    args = ["report", tmp_path / "results.csv", "--methods", "temp", "--cv", "2"]
    assert_refused(
        capsys,
        [*args, "--out", tmp_path, "--overwrite"],
        tmp_path,
        "refusing to write over an input file",
    )
    (tmp_path / "file").write_text("x")
    assert_refused(
        capsys, [*args, "--out", tmp_path / "file"], tmp_path, "is not a folder"
    )


# --- as the shell sees it --------------------------------------------------------


@pytest.mark.parametrize("case", ["fit_over_existing", "apply_over_own_input"])
def test_subprocess_refusals_exit_2_with_one_line(tmp_path, fitted, case):
    calibrator, logits_file, labels_file = fitted
    if case == "fit_over_existing":
        (tmp_path / "c.skops").write_bytes(b"old")
        args = ["fit", "--method", "temp", "--logits", "l.npy", "--labels", "y.npy"]
        args += ["-o", "c.skops"]
        message = "c.skops: already exists; pass --overwrite to replace it"
    else:
        args = ["apply", "ts.skops", "--logits", "l.npy", "-o", "l.npy", "--overwrite"]
        message = "l.npy: refusing to write over an input file; choose another output"
    before = snapshot(tmp_path)
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr == f"sklearn-calib {args[0]}: error: {message}\n"
    assert snapshot(tmp_path) == before
