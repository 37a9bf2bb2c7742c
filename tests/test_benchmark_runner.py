"""benchmarks/run.py collects the tables without overwriting hand-written pages."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

RUNNER = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
TABLE = "# Quality\n\n| a | b |\n|---|---|\n| {} | {} |\n"


@pytest.fixture(scope="module")
def runner():
    if not RUNNER.is_file():
        pytest.skip("benchmarks/run.py is not in this checkout")
    spec = importlib.util.spec_from_file_location("benchmark_runner", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def results(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    (out / "bench_quality.md").write_text(TABLE.format(1, 2))
    return out


def test_collects_into_results_by_default(runner, results):
    runner.main(["--collect", "--out", str(results)])
    page = results / "collected.md"
    text = page.read_text()
    assert text.splitlines()[0] == runner.MARKER
    # the benchmark's own heading, demoted one level under the page title
    assert "## Quality" in text and "| 1 | 2 |" in text
    # a page the runner wrote is rewritten without asking
    (results / "bench_quality.md").write_text(TABLE.format(3, 4))
    runner.main(["--collect", "--out", str(results)])
    assert "| 3 | 4 |" in page.read_text() and "| 1 | 2 |" not in page.read_text()


def test_never_overwrites_a_hand_written_page_unasked(runner, results, tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nAn analysis written by hand.\n")
    with pytest.raises(SystemExit) as raised:
        runner.main(["--collect", "--out", str(results), "--docs", str(page)])
    assert raised.value.code == 2
    assert page.read_text() == "# Benchmarks\n\nAn analysis written by hand.\n"
    runner.main(["--collect", "--out", str(results), "--docs", str(page), "--force"])
    assert page.read_text().splitlines()[0] == runner.MARKER


def test_refuses_before_running_any_benchmark(runner, results, tmp_path, monkeypatch):
    page = tmp_path / "benchmarks.md"
    page.write_text("hand-written\n")

    def no_benchmark(name):
        raise AssertionError(f"{name} ran before the page was checked")

    # The runner's own name for importlib, not the module every import uses.
    fake = SimpleNamespace(import_module=no_benchmark)
    monkeypatch.setattr(runner, "importlib", fake)
    with pytest.raises(SystemExit):
        runner.main(
            ["--out", str(results), "--docs", str(page), "--only", "bench_quality"]
        )
