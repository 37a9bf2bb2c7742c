"""What every part of the command line shares: exit codes and the error type."""

import re

EXIT_OK = 0
EXIT_USAGE = 2


class CommandError(Exception):
    """Bad usage or input: reported as one line on stderr, exit status 2."""


def first_line(message):
    """The first line of an exception or warning message, stripped."""
    text = str(message).strip()
    return text.splitlines()[0] if text else ""


def warning_lines(caught):
    """One line per kind of warning caught, in order of first appearance.

    A cross-validated fit repeats a warning once per split with other
    numbers in it (a temperature, a count): such repeats are counted on
    the first one's line instead of listed.
    """
    kinds = {}
    for w in caught:
        text = f"{w.category.__name__}: {first_line(w.message)}"
        kind = re.sub(r"\d+(?:[.,]\d+)*(?:e[+-]?\d+)?", "#", text)
        kinds.setdefault(kind, [text, 0])[1] += 1
    return [
        text if count == 1 else f"{text} (and {count - 1} more like it)"
        for text, count in kinds.values()
    ]
