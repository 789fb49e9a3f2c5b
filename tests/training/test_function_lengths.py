"""House rule (issue 19): no function in training/ or checkpoints/ longer than ~60 lines, so each step
stays readable."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vlarl_cli.checkpoints
import vlarl_cli.training

LIMIT = 60  # lines from ``def`` to the last line, docstring included


@pytest.mark.parametrize("package", [vlarl_cli.training, vlarl_cli.checkpoints], ids=lambda p: p.__name__)
def test_no_function_is_over_the_limit(package) -> None:
    root = Path(package.__file__).parent
    long = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LIMIT:
                    long.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named steps: " + ", ".join(long)
