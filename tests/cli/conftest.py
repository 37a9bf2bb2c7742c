"""Helpers and fixtures of the command-line tests.

A few tests run the installed command in a subprocess, as a user would (exit
status, stderr); the many input cases call ``cli.main`` in-process (the same
code the console script runs), which keeps the tests fast.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling, cli
from sklearn_calib.utils._testing import make_logits

N_SAMPLES, N_CLASSES = 300, 4


def run_cli(*args, cwd=None):
    """Run ``python -m sklearn_calib`` in a subprocess, piped (not a terminal)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    return subprocess.run(
        [sys.executable, "-m", "sklearn_calib", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def call(capsys, *args):
    """Run ``cli.main`` in-process; returns (status, stdout, stderr)."""
    status = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_usage_error(capsys, args, *fragments):
    status, out, err = call(capsys, *args)
    assert status == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def logits_y():
    logits, y = make_logits(n_samples=N_SAMPLES, n_classes=N_CLASSES, seed=7)
    return logits, y


def save_two_splits(path, logits, y, n_val):
    """An ``.npz`` of the first ``n_val`` rows as val, the rest as test."""
    np.savez(
        path,
        logits_val=logits[:n_val],
        y_val=y[:n_val],
        logits_test=logits[n_val:],
        y_test=y[n_val:],
    )
    return path


@pytest.fixture
def npz_two_splits(tmp_path, logits_y):
    return save_two_splits(tmp_path / "two.npz", *logits_y, 200)


def reference_proba(logits, y, new_logits):
    return TemperatureScaling(device="cpu").fit(logits, y).predict_proba(new_logits)


def report_json(capsys, *args):
    status, out, err = call(capsys, "report", *args, "--format", "json")
    assert status == 0, err
    return json.loads(out)
