"""Print pip constraints that pin every declared floor of pyproject.toml.

CI's floors stage installs the project with these constraints, so the floors
that pyproject.toml declares are exactly the versions tested: raising a floor
there changes what CI installs, and a requirement without a ``>=`` floor (or
two extras that disagree on one) fails here. The docs extra is left out: it
builds the documentation and is not installed by users of the library.

Usage::

    python .ci/floor_constraints.py > floors.txt
    PIP_CONSTRAINT=floors.txt python -m pip install -e ".[test]"
"""

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(
    r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)\s*$"
)


def floors(pyproject):
    project = tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra, extra_requirements in project["optional-dependencies"].items():
        if extra != "docs":
            requirements += extra_requirements
    found = {}
    for requirement in requirements:
        match = REQUIREMENT.match(requirement)
        if match is None:
            sys.exit(f"{pyproject}: {requirement!r} has no single '>=' floor to test")
        name = re.sub(r"[-_.]+", "-", match[1]).lower()
        if found.setdefault(name, match[2]) != match[2]:
            sys.exit(f"{pyproject}: two floors for {name}: {found[name]}, {match[2]}")
    return found


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"
    for name, version in sorted(floors(path).items()):
        print(f"{name}=={version}")
