"""Every Python block of README.md and the documentation pages runs as written.

Each page is one script: its Python blocks run in order in one namespace, in
an empty working folder, so a page must load whatever it uses (the bundled
logits, for example). A ``text`` block that directly follows a Python block
(only blank lines between them) is that block's printed output: it is
compared with what the block prints, numbers to the precision the page shows
(``0.2038`` matches anything that rounds to it) and ``...`` standing for any
text. The figures in the docs therefore cannot drift from the code.
"""

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/*.rst"), *ROOT.glob("docs/user_guide/*.rst")]
)

_RST_BLOCK = re.compile(r"^( *)\.\. code-block:: *(\w+)\s*$")
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _rst_blocks(text):
    """(language, code, follows_previous_block) for each code block of a page."""
    lines = text.splitlines()
    blocks, i, prose_since_block = [], 0, True
    while i < len(lines):
        match = _RST_BLOCK.match(lines[i])
        if not match:
            if lines[i].strip():
                prose_since_block = True
            i += 1
            continue
        indent = len(match[1])
        language = match[2]
        i += 1
        # Options such as ``:caption:`` sit right under the directive.
        while i < len(lines) and re.match(r"^ +:\w[\w-]*:", lines[i]):
            i += 1
        body = []
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
        ):
            body.append(lines[i])
            i += 1
        code = _dedent(body)
        blocks.append((language, code, not prose_since_block))
        prose_since_block = False
    return blocks


def _markdown_blocks(text):
    blocks, prose_since_block = [], True
    fence = None
    for line in text.splitlines():
        if fence is None:
            if match := re.match(r"^```(\w*)\s*$", line):
                fence = (match[1] or "text", [])
            elif line.strip():
                prose_since_block = True
            continue
        if line.startswith("```"):
            blocks.append((fence[0], "\n".join(fence[1]) + "\n", not prose_since_block))
            prose_since_block = False
            fence = None
        else:
            fence[1].append(line)
    return blocks


def _dedent(body):
    while body and not body[-1].strip():
        body.pop()
    while body and not body[0].strip():
        body.pop(0)
    width = min(
        (len(line) - len(line.lstrip()) for line in body if line.strip()), default=0
    )
    return "\n".join(line[width:] for line in body) + "\n"


def page_blocks(path):
    text = path.read_text(encoding="utf-8")
    return _markdown_blocks(text) if path.suffix == ".md" else _rst_blocks(text)


def _shown_precision(token):
    """Half a unit in the last digit the page shows (relative for exponents)."""
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    step = 10.0 ** (-decimals) * (10.0 ** int(exponent) if exponent else 1.0)
    return 0.5 * step


def outputs_match(expected, printed):
    """Compare printed text with a page's output block.

    Text outside numbers must match up to white space; ``...`` in the
    expected text stands for any text; each number must round to the value
    shown, at the precision shown.
    """
    pattern, numbers = [], []
    position = 0
    squeezed = " ".join(expected.split())
    for match in _NUMBER.finditer(squeezed):
        pattern.append(_literal(squeezed[position : match.start()]))
        pattern.append(r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf)")
        numbers.append(match[0])
        position = match.end()
    pattern.append(_literal(squeezed[position:]))
    found = re.fullmatch("".join(pattern), " ".join(printed.split()), re.DOTALL)
    if found is None:
        return False
    for shown, value in zip(numbers, found.groups(), strict=True):
        if abs(float(value) - float(shown)) > _shown_precision(shown) * (1 + 1e-9):
            return False
    return True


def _literal(text):
    parts = [re.escape(part) for part in text.split("...")]
    return r".*?".join(parts).replace(r"\ ", r"\s*")


@pytest.fixture
def page_environment(tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    yield
    plt.close("all")


def _page_id(path):
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", PAGES, ids=_page_id)
def test_page_runs_as_written(path, page_environment):
    blocks = page_blocks(path)
    namespace = {"__name__": f"page_{path.stem}"}
    last_printed = None
    for number, (language, code, follows_previous) in enumerate(blocks, start=1):
        if language == "python":
            stdout = io.StringIO()
            try:
                with contextlib.redirect_stdout(stdout):
                    exec(
                        compile(code, f"{_page_id(path)}, block {number}", "exec"),
                        namespace,
                    )
            except Exception as exc:
                pytest.fail(
                    f"{_page_id(path)}: Python block {number} fails as written: "
                    f"{type(exc).__name__}: {exc}\n{code}"
                )
            last_printed = stdout.getvalue()
        elif language == "text" and follows_previous and last_printed is not None:
            assert outputs_match(code, last_printed), (
                f"{_page_id(path)}: block {number} shows output that the code does "
                f"not print.\nshown:\n{code}\nprinted:\n{last_printed}"
            )
            last_printed = None
        else:
            last_printed = None


def test_output_comparison_respects_shown_precision():
    assert outputs_match("T = 2.4975 ece 0.0137", "T = 2.49751234 ece 0.01374")
    assert not outputs_match("T = 2.4975", "T = 2.4985")
    assert outputs_match("nll ...  0.20", "nll (test, clipped) 0.2038")
    assert not outputs_match("nll 0.20", "brier 0.20")
    assert outputs_match("1.3e-10", "1.34e-10")
    assert not outputs_match("1.3e-10", "1.4e-10")


def test_block_parser_finds_blocks_and_their_outputs():
    text = (
        "Title\n=====\n\n.. code-block:: python\n\n    x = 1\n    print(x)\n\n"
        ".. code-block:: text\n\n    1\n\nProse.\n\n.. code-block:: text\n\n    2\n"
    )
    blocks = _rst_blocks(text)
    assert [b[0] for b in blocks] == ["python", "text", "text"]
    assert blocks[0][1] == "x = 1\nprint(x)\n"
    assert [b[2] for b in blocks] == [False, True, False]


def test_every_page_is_collected():
    assert ROOT / "README.md" in PAGES
    assert any(p.name == "metrics.rst" for p in PAGES)
    assert all(os.path.isfile(p) for p in PAGES)
