"""House rule (issue 19, STYLE.md): no function in the package longer than 60 lines, so each step stays
readable. It began with training/ and checkpoints/; since 2026-12-07 no function anywhere in vlarl_cli is over."""

from __future__ import annotations

import ast
from pathlib import Path

import vlarl_cli

LIMIT = 60  # lines from ``def`` to the last line, docstring included


def test_no_function_is_over_the_limit() -> None:
    root = Path(vlarl_cli.__file__).parent
    long = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LIMIT:
                    long.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named steps: " + ", ".join(long)
