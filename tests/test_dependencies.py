"""pyproject.toml against the code: every third-party import of src/vlarl_cli is declared, and every
declared distribution is imported, by vlarl itself or by the dependency that needs it (named below and
checked in that dependency's installed source). Import names map to distributions through
``importlib.metadata.packages_distributions`` (``PIL`` -> pillow, ``yaml`` -> PyYAML); a package that is not
installed here maps by its normalised name (``mani_skill`` -> mani-skill)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src" / "vlarl_cli"
#: Extras that are tools for developing vlarl (tests, lint, build), not code that src/ imports.
TOOL_EXTRAS = {"dev"}

#: Imported but deliberately not declared, and why; each is imported lazily (checked below).
NOT_DECLARED = {
    "libero": "its published metadata pins robomimic / torchvision / mujoco>=3 and would replace the CPU torch; "
    "scripts/install.sh and `vlarl setup-libero` install it with --no-deps (its runtime needs are declared)",
}
#: Distributions declared for a dependency's sake: the installed distribution and the files of it that
#: import them, and why vlarl declares them itself.
FOR_A_DEPENDENCY: dict[str, tuple[str, str, str]] = {
    "bddl": ("libero", "libero/libero/", "LIBERO parses its task files with bddl (libero: --no-deps)"),
    "easydict": ("libero", "libero/libero/", "LIBERO's object definitions (libero: --no-deps)"),
    "cloudpickle": ("libero", "libero/libero/", "LIBERO's vector env (libero: --no-deps)"),
    "termcolor": ("libero", "libero/libero/", "LIBERO's log / download utilities (libero: --no-deps)"),
    "tqdm": ("libero", "libero/libero/", "LIBERO's download utilities (libero: --no-deps)"),
    "future": ("bddl", "bddl/", "bddl imports future.utils without declaring it"),
    "imageio-ffmpeg": ("imageio", "imageio/plugins/ffmpeg.py", "imageio's ffmpeg plugin writes vlarl's MP4s"),
    "tensorboard": ("torch", "torch/utils/tensorboard/", "the tensorboard sink is torch.utils.tensorboard"),
    "sapien": ("mani-skill", "mani_skill/", "mani-skill 3.0.1's simulator, pinned to the release it was made with"),
}


def _canonical(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    assert match, f"unreadable requirement {spec!r} in pyproject.toml"
    return _canonical(match.group(1))


@cache
def _declared() -> dict[str, str]:
    """Declared distribution -> where (``dependencies`` or ``extra <name>``), tool extras left out."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_requirement_name(spec): "dependencies" for spec in project["dependencies"]}
    for extra, specs in project.get("optional-dependencies", {}).items():
        if extra not in TOOL_EXTRAS:
            for spec in specs:
                declared.setdefault(_requirement_name(spec), f"extra {extra}")
    return declared


@dataclass(frozen=True)
class Import:
    module: str  # top-level import name
    where: str  # path:line
    lazy: bool  # inside a function, a TYPE_CHECKING block or a try that handles ImportError


def _is_guard(node: ast.AST) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return True
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return True
    return isinstance(node, ast.Try) and any(
        h.type is not None and re.search(r"\b(ImportError|ModuleNotFoundError)\b", ast.unparse(h.type))
        for h in node.handlers)


def _imports_in(tree: ast.AST, where: str) -> list[Import]:
    found: list[Import] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(a.name.split(".")[0], f"{where}:{child.lineno}", guarded) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append(Import(child.module.split(".")[0], f"{where}:{child.lineno}", guarded))
            visit(child, guarded or _is_guard(child))

    visit(tree, False)
    return found


@cache
def _src_imports() -> tuple[Import, ...]:
    """Third-party imports of src/vlarl_cli (the standard library and vlarl_cli itself left out)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        found += _imports_in(ast.parse(path.read_text()), str(path.relative_to(ROOT)))
    return tuple(i for i in found if i.module not in sys.stdlib_module_names and i.module != "vlarl_cli")


@cache
def _installed() -> dict[str, list[str]]:
    return metadata.packages_distributions()


@cache
def _distributions_of(module: str) -> frozenset[str]:
    installed = _installed().get(module)
    return frozenset(_canonical(d) for d in installed) if installed else frozenset({_canonical(module)})


def _undeclared(imports: tuple[Import, ...], declared: dict[str, str]) -> list[str]:
    return sorted({f"{i.module} ({i.where})" for i in imports if not _distributions_of(i.module) & declared.keys()})


def test_every_third_party_import_of_src_is_declared() -> None:
    missing = _undeclared(tuple(i for i in _src_imports() if i.module not in NOT_DECLARED), _declared())
    assert not missing, f"imported by src/vlarl_cli but not declared in pyproject.toml: {missing}"


def test_every_declared_dependency_is_imported_by_the_code_that_needs_it() -> None:
    imported = {d for i in _src_imports() for d in _distributions_of(i.module)}
    unused = sorted(set(_declared()) - imported - set(FOR_A_DEPENDENCY))
    assert not unused, f"declared in pyproject.toml but imported nowhere in src/vlarl_cli: {unused}"
    stale = sorted(set(FOR_A_DEPENDENCY) & imported)
    assert not stale, f"listed as needed by a dependency, but src/vlarl_cli imports them itself: {stale}"
    assert set(FOR_A_DEPENDENCY) <= set(_declared()), "FOR_A_DEPENDENCY names a distribution pyproject lacks"


def test_the_checks_see_an_undeclared_import_and_lazy_ones() -> None:
    """The scanner itself: a module-level import of an undeclared package is found; a function-level, a
    TYPE_CHECKING and an ``except ImportError`` import are marked lazy."""
    source = ("import numpy\nimport not_a_real_package.sub\nfrom typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    import wandb\n"
              "try:\n    import swanlab\nexcept ImportError:\n    swanlab = None\n"
              "def f():\n    from tensorstore import x\n")
    imports = _imports_in(ast.parse(source), "m.py")
    assert [(i.module, i.lazy) for i in imports] == [
        ("numpy", False), ("not_a_real_package", False), ("typing", False), ("wandb", True), ("swanlab", True),
        ("tensorstore", True)]
    third_party = tuple(i for i in imports if i.module not in sys.stdlib_module_names)
    assert _undeclared(third_party, _declared()) == ["not_a_real_package (m.py:2)"]


def test_extras_and_libero_are_imported_only_where_they_are_used() -> None:
    """A distribution that only an extra declares (or that is not declared) is imported inside a function
    or behind a guard, so that the base install imports every module of vlarl."""
    declared = _declared()
    optional = [i for i in _src_imports() if not i.lazy and (i.module in NOT_DECLARED or any(
        declared.get(d, "dependencies") != "dependencies" for d in _distributions_of(i.module)))]
    assert not optional, f"optional packages imported at module level: {sorted(map(str, optional))}"


@cache
def _modules_imported_by(importer: str, prefix: str) -> frozenset[str]:
    """Top-level modules imported by the installed ``importer``'s .py files under ``prefix``."""
    files = metadata.distribution(importer).files or []
    sources = [Path(str(f.locate())) for f in files if str(f).startswith(prefix) and str(f).endswith(".py")]
    sources = [f for f in sources if f.is_file()]
    assert sources, f"{importer} has no files under {prefix}"
    modules: set[str] = set()
    for f in sources:
        try:
            tree = ast.parse(f.read_bytes())
        except SyntaxError:  # a code template shipped as .py (never imported)
            continue
        modules.update(i.module for i in _imports_in(tree, str(f)))
    return frozenset(modules)


@pytest.mark.parametrize("name", sorted(FOR_A_DEPENDENCY))
def test_a_dependency_declared_for_another_is_imported_by_it(name: str) -> None:
    importer, prefix, why = FOR_A_DEPENDENCY[name]
    try:
        modules = _modules_imported_by(importer, prefix)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{importer} is not installed here, so who imports {name} ({why}) cannot be read")
    wanted = {m for m, dists in _installed().items() if _canonical(name) in map(_canonical, dists)}
    assert modules & (wanted or {name.replace("-", "_")}), f"{importer} ({prefix}) imports none of {wanted} ({why})"
