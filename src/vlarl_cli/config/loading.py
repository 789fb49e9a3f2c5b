"""Load a run configuration: compose with Hydra, resolve with OmegaConf, validate with pydantic.

RLinf composes its recipes with Hydra (``defaults:`` lists with package targets such as
``env/libero_spatial@env.train``, ``override hydra/job_logging``, ``${a.b}`` and ``${oc.env:X}``
interpolation), so we use Hydra's compose API rather than a home-made composer, then validate the
resolved tree against :class:`~vlarl_cli.config.schema.VlarlConfig`.

Order of operations:
1. find the file (a path, or a preset name under ``configs/``);
2. compose it with Hydra, searching its own folder and vlarl's ``configs/`` for ``defaults:`` entries;
3. apply ``key.sub=value`` overrides (keys that do not exist yet are created, so a typo is caught by
   step 5 with a suggestion instead of Hydra's "use +key");
4. resolve interpolations;
5. walk the tree against the schema: RLinf keys vlarl does not use are dropped and reported once,
   unknown keys are errors with "did you mean";
6. validate with pydantic (types, ranges, cross-field rules).
Every failure is a :class:`~vlarl_cli.errors.ConfigError` with one paragraph naming the problem.
"""

from __future__ import annotations

import os
import re
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from vlarl_cli.config import unsupported
from vlarl_cli.config.schema import Section, VlarlConfig
from vlarl_cli.errors import ConfigError, did_you_mean

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
# Folders of the `defaults:` groups; files there are fragments, not runnable presets.
_GROUP_DIRS = {"env", "model", "hybrid_engines", "weight_syncer", "profile"}


@dataclass
class LoadedConfig:
    config: VlarlConfig
    source: Path
    ignored: list[str] = field(default_factory=list)  # dotted paths of RLinf keys vlarl does not use
    deviations: list[str] = field(default_factory=list)  # RLinf keys vlarl accepts but does not follow
    overrides: list[str] = field(default_factory=list)


def list_presets() -> list[str]:
    """Names of the runnable presets shipped in ``configs/``."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def find_config(name_or_path: str | Path) -> Path:
    """A config file from a path or a preset name (``quickstart``, ``libero_10_ppo_openpi.yaml``)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path.resolve()
    stem = path.name[:-5] if path.name.endswith(".yaml") else path.name
    if path.parent == Path(".") and (CONFIG_DIR / f"{stem}.yaml").is_file():
        return (CONFIG_DIR / f"{stem}.yaml").resolve()
    presets = list_presets()
    raise ConfigError(
        f'Config "{name_or_path}" is neither a file nor a preset.{did_you_mean(stem, presets)}',
        f"Pass a path to a YAML file or one of the presets: {', '.join(presets)}.",
    )


def load_config(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = (), *,
                world_size: int = 1) -> LoadedConfig:
    """Load, compose, override, resolve and validate a run config. See the module docstring."""
    source = find_config(name_or_path)
    check_fragments(source, read_primary(source))
    raw = compose_raw(source, list(overrides))
    return validate_tree(raw, source, overrides=list(overrides), world_size=world_size)


def validate_tree(raw: dict[str, Any], source: Path, *, overrides: list[str] | None = None,
                  world_size: int = 1) -> LoadedConfig:
    """Steps 5 and 6 on a composed, resolved tree: RLinf keys dropped and reported, unknown keys and invalid
    values a :class:`ConfigError`."""
    cleaned, ignored = check_keys(VlarlConfig, raw)
    deviations = unsupported.deviations(raw)
    deviating = {d.split(" = ", 1)[0] for d in deviations}
    ignored = [path for path in ignored if path not in deviating]
    try:
        config = VlarlConfig.model_validate(cleaned, context={"world_size": world_size})
    except ValidationError as err:
        raise ConfigError(f"Invalid config {source.name}: {format_validation_error(err)}",
                          "Correct the value(s) in the file or with a KEY=VALUE override.") from None
    return LoadedConfig(config=config, source=source, ignored=ignored, deviations=deviations,
                        overrides=list(overrides or []))


def read_primary(source: Path) -> dict[str, Any]:
    """The config file as plain YAML, checked before Hydra sees it: Hydra's messages for a binary file, a
    YAML syntax error or an empty file point at the ``defaults:`` list, which is not the problem."""
    import yaml

    try:
        data = source.read_bytes()
    except OSError as err:
        raise ConfigError(f"Cannot read config {source}: {err.strerror or err}.",
                          "Check the path and its permissions.") from None
    if b"\x00" in data:
        raise ConfigError(f"Config {source} is a binary file, not YAML.", "Pass a YAML config file or a preset name.")
    check_yaml_limits(source, data)
    try:
        loaded = yaml.safe_load(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"Config {source} is not UTF-8 text (byte {err.start}); it is not a YAML file.",
                          "Pass a YAML config file or a preset name.") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        what = getattr(err, "problem", None) or _first_line(err)
        raise ConfigError(f"Config {source} has a YAML syntax error{at}: {what}.",
                          "Fix the YAML there (indentation, a missing ':' or closing bracket, a tab).") from None
    except ValueError as err:  # a value YAML matched but cannot build: an int of > 4300 digits, a date 2024-13-45
        raise ConfigError(f"Config {source} holds a value YAML cannot read: {_first_line(err)}.",
                          "Fix that value (quote it to keep it as text).") from None
    if loaded is None:
        raise ConfigError(f"Config {source} is empty (or only `null`); running on defaults is never what a file "
                          "means.", "Write the settings into the file, or start from a preset: vlarl rl-train "
                          "--config quickstart --print-config > my.yaml.")
    if not isinstance(loaded, dict):
        raise ConfigError(f"Config {source} holds a YAML {type(loaded).__name__}, not a mapping of sections.",
                          "A config file maps section names (cluster, runner, algorithm, env, rollout, actor) "
                          "to their settings.")
    return loaded


#: what a config file may be: far above any real config (the presets: < 10 KiB, depth < 8, no aliases), far
#: below what exhausts memory or the stack (a "billion laughs" file of nested aliases, 10^5 nested brackets)
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_DEPTH = 64
MAX_CONFIG_ALIASES = 256


def check_yaml_limits(source: Path, data: bytes) -> None:
    """Refuse a config file over the size, nesting or alias limits, from the YAML event stream (nothing is
    built); a syntax error is left to the parser's own report."""
    import yaml

    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"Config {source} is {len(data)} bytes; a config file holds at most {MAX_CONFIG_BYTES} "
                          "(is it a data file?).", "Pass the run's YAML config (a few KiB).")
    depth = aliases = 0
    try:
        for event in yaml.parse(data.decode("utf-8", errors="replace")):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_CONFIG_DEPTH:
                    raise ConfigError(f"Config {source} nests deeper than {MAX_CONFIG_DEPTH} levels.",
                                      "A config nests sections a few levels deep; flatten the file.")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_CONFIG_ALIASES:
                    raise ConfigError(f"Config {source} uses more than {MAX_CONFIG_ALIASES} YAML aliases (*name); "
                                      "expanded, they could exhaust the memory.",
                                      "Write the values out, or use ${a.b} interpolation.")
    except yaml.YAMLError:
        return


#: what the resolved config may grow to (units: scalars and characters); real configs are < 10^4
MAX_CONFIG_EXPANSION = 10**6
_INTERPOLATION = re.compile(r"\$\{([^${}]*)\}")


def check_expansion(tree: Any, source: Path) -> None:
    """Refuse a config whose ``${a.b}`` interpolations would expand beyond :data:`MAX_CONFIG_EXPANSION` when
    resolved (``b: [${a}, ${a}]``, ``c: [${b}, ${b}]``, ... doubles at each level), from the unresolved tree."""
    sizes: dict[str, int] = {}

    def lookup(path: str) -> Any:
        node = tree
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def size(node: Any, stack: tuple[str, ...]) -> int:
        if isinstance(node, dict):
            return 1 + sum(size(v, stack) for v in node.values())
        if isinstance(node, list):
            return 1 + sum(size(v, stack) for v in node)
        if not isinstance(node, str):
            return 1
        total = len(node)
        for path in _INTERPOLATION.findall(node):
            if path in stack:  # a cycle: OmegaConf reports it itself
                continue
            if path not in sizes:
                sizes[path] = size(lookup(path), (*stack, path))
            total += sizes[path]
            if total > MAX_CONFIG_EXPANSION:
                break
        return total

    if size(tree, ()) > MAX_CONFIG_EXPANSION:
        raise ConfigError(f"Config {source} would expand to more than {MAX_CONFIG_EXPANSION} values when its ${{...}} "
                          "interpolations are resolved (interpolations of interpolations multiply).",
                          "Interpolate scalar values (e.g. ${actor.model.num_action_chunks}), not whole sections "
                          "nested into each other.")


def check_fragments(source: Path, data: dict[str, Any]) -> None:
    """An ``env/...`` or ``model/...`` entry of the ``defaults:`` list that no folder holds is an RLinf simulator
    or policy vlarl does not ship; say so (and what it ships) instead of Hydra's "Could not load"."""
    defaults = data.get("defaults")
    if defaults is not None and not isinstance(defaults, list):
        raise ConfigError(f"{source}: `defaults:` holds a YAML {type(defaults).__name__}, not a list of files.",
                          "Write it as a list, e.g. `defaults:` then `  - env/libero_spatial@env.train` on the next "
                          "line, or remove it.")
    for entry in defaults or []:
        if isinstance(entry, dict) and entry:
            key, option = next(iter(entry.items()))
            name = f"{str(key).split('@')[0]}/{option}"
        elif isinstance(entry, str):
            name = entry.split("@")[0]
        else:
            continue
        group, _, option = name.lstrip("/").partition("/")
        if group not in ("env", "model") or not option or option == "null":
            continue
        folders = (source.parent, source.parent.parent / "config", CONFIG_DIR)
        if any((folder / group / f"{option}.yaml").is_file() for folder in folders):
            continue
        shipped = ", ".join(sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml")))
        what = "simulator / task" if group == "env" else "policy"
        raise ConfigError(f'{source.name} builds on the {what} fragment "{group}/{option}", which vlarl does not '
                          f"have: it is not an RLinf feature vlarl implements. {unsupported.SUPPORTED}; its "
                          f"{group}/ fragments are: {shipped}.",
                          f"Use one of those in the `defaults:` list (e.g. {group}/{'libero_spatial' if group == 'env' else 'pi0'}"
                          f"@{'env.train' if group == 'env' else 'actor.model'}), or start from a vlarl preset.")


def compose_raw(source: Path, overrides: list[str]) -> dict[str, Any]:
    """Hydra-compose ``source`` with the given overrides and return the resolved plain dict."""
    import tempfile

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    hydra_overrides, value_overrides = _split_overrides(overrides)
    # RLinf recipes search `${oc.env:EMBODIED_PATH}/config/`; point it at the recipe's parent so a recipe
    # inside an RLinf checkout finds its own fragments. vlarl's configs/ is always searched as well.
    os.environ.setdefault("EMBODIED_PATH", str(source.parent.parent))
    GlobalHydra.instance().clear()
    with tempfile.TemporaryDirectory(prefix=".vlarl-config-") as scratch:
        # Hydra only finds `<name>.yaml`; a `.yml` or extension-less file is composed from a copy named
        # .yaml, with the file's own folder still searched for its `defaults:` entries.
        primary_dir, name = source.parent, source.stem
        if source.suffix != ".yaml":
            primary_dir, name = Path(scratch), source.name.replace(".", "_")
            (primary_dir / f"{name}.yaml").write_bytes(source.read_bytes())
        folders = [f"file://{CONFIG_DIR}"] + ([f"file://{source.parent}"] if primary_dir != source.parent else [])
        searchpath = f"hydra.searchpath=[{','.join(folders)}]"
        try:
            with warnings.catch_warnings():
                # RLinf recipes omit `_self_`; Hydra's default (the file after its defaults) is what they mean.
                warnings.filterwarnings("ignore", message=".*Defaults list is missing `_self_`.*")
                with initialize_config_dir(config_dir=str(primary_dir), version_base=None):
                    cfg = compose(config_name=name, overrides=[searchpath, *hydra_overrides])
        except RecursionError:
            raise ConfigError(f"The `defaults:` lists of {source} include each other in a circle: "
                              f"{defaults_cycle(source) or 'a file comes back into its own defaults chain'}.",
                              "Remove the entry that brings a file back into its own defaults chain.") from None
        except Exception as err:  # Hydra raises many exception types; all are config problems here
            raise ConfigError(f"Cannot compose {source}: {_first_line(err)}", _compose_fix(err)) from None
        finally:
            GlobalHydra.instance().clear()
    OmegaConf.set_struct(cfg, False)
    cfg.pop("hydra", None)
    cfg.pop("defaults", None)
    for key, value in value_overrides:
        try:
            # a placement override replaces the file's placement (merging would place components twice)
            merge = not key.endswith("component_placement")
            OmegaConf.update(cfg, key, value, merge=merge, force_add=True)
        except OmegaConfBaseException as err:
            raise ConfigError(f'Cannot apply override "{_clip(f"{key}={value}")}": {_first_line(err)}',
                              _override_fix(err)) from None
    check_expansion(OmegaConf.to_container(cfg, resolve=False), source)
    try:
        data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as err:
        raise ConfigError(f"Cannot resolve {source.name}: {_first_line(err)}",
                          "Fix the ${...} interpolation or set the referenced key/environment variable.") from None
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items()}


def _compose_fix(err: BaseException) -> str:
    text = str(err)
    if "while parsing" in text or "while scanning" in text or "mapping values are not allowed" in text:
        return "Fix the YAML syntax at the line named (in the file it names)."
    if "Could not delete" in text:
        return "`~KEY` deletes a key the config has; check its dotted path (`--print-config` shows them)."
    if _is_a(err, "GrammarParseError") or (err.__cause__ is not None and _is_a(err.__cause__, "GrammarParseError")):
        return "Fix the ${...} interpolation at the key named (write a literal ${ as \\${)."
    if "codec can't decode" in text:
        return "A file of the `defaults:` list is binary, not YAML; fix the entry or the file."
    if "Could not " in text or "Cannot find" in text or "not found" in text.lower():
        return ("Check the `defaults:` list: each entry names a file (without .yaml) in the config's folder or in "
                "vlarl's configs/ (e.g. env/libero_spatial@env.train).")
    return "Check the `defaults:` list and the override syntax (KEY=VALUE, +KEY=VALUE, ~KEY)."


def _override_fix(err: BaseException) -> str:
    if _is_a(err, "GrammarParseError"):
        return "Fix the ${...} interpolation in the value (write a literal ${ as \\${)."
    return ("A section (a mapping) takes KEY.SUB=VALUE overrides or a {...} mapping, a list takes [...]; "
            "`--print-config` shows each key's shape.")


def _is_a(err: BaseException, name: str) -> bool:
    return any(cls.__name__ == name for cls in type(err).__mro__)


def defaults_cycle(source: Path) -> str | None:
    """``a.yaml -> b.yaml -> a.yaml`` for plain `defaults:` entries that lead back to a file, else None."""
    import yaml

    def children(path: Path) -> list[Path]:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, ValueError, yaml.YAMLError):
            return []
        entries = data.get("defaults") if isinstance(data, dict) else None
        out = []
        for entry in entries or []:
            target = next(iter(entry.items()), (None, None)) if isinstance(entry, dict) else (None, entry)
            group, option = target
            if not isinstance(option, str) or option == "_self_":
                continue
            rel = f"{group.split('@')[0].lstrip('/')}/{option}" if isinstance(group, str) else option.split("@")[0]
            rel = rel.removeprefix("override ").lstrip("/")
            for folder in (path.parent, source.parent, CONFIG_DIR):
                candidate = folder / f"{rel}.yaml"
                if candidate.is_file():
                    out.append(candidate.resolve())
                    break
        return out

    def walk(path: Path, chain: list[Path]) -> list[Path] | None:
        if path in chain:
            return [*chain[chain.index(path):], path]
        for child in children(path):
            found = walk(child, [*chain, path])
            if found:
                return found
        return None

    cycle = walk(source.resolve(), [])
    return " -> ".join(p.name for p in cycle) if cycle else None


def _split_overrides(overrides: list[str]) -> tuple[list[str], list[tuple[str, Any]]]:
    """Group overrides (``+x``, ``~x``, ``group/option``, ``@``) go to Hydra; KEY=VALUE pairs to us."""
    import yaml

    hydra_side: list[str] = []
    values: list[tuple[str, Any]] = []
    for item in overrides:
        if item.startswith("~"):  # `~key` (or `~key=value`) deletes a key: Hydra's syntax, no value needed
            hydra_side.append(item)
            continue
        if "=" not in item:
            raise ConfigError(f'Override "{item}" is not of the form KEY=VALUE.',
                              "Write overrides like actor.optim.lr=1e-5 or env.train.total_num_envs=4.")
        key, text = item.split("=", 1)
        if key.startswith(("+", "~")) or "/" in key or "@" in key or key.startswith("hydra"):
            hydra_side.append(item)
            continue
        try:
            value = yaml.safe_load(text) if text != "" else ""
        except yaml.YAMLError:
            value = text
        except ValueError as err:  # an int of > 4300 digits, a date like 2024-13-45: YAML matched, cannot build
            raise ConfigError(f'Override "{_clip(item)}" gives a value YAML cannot read: {_first_line(err)}.',
                              "Fix the value after the '=' (quote it to keep it as text).") from None
        values.append((key.strip(), value))
    return hydra_side, values


def _first_line(err: BaseException) -> str:
    """The first lines of ``err``'s message; of its cause's when it has none (Hydra's ConfigCompositionException
    carries the problem only in ``__cause__``)."""
    text = str(err).strip()
    if not text and err.__cause__ is not None:
        return _first_line(err.__cause__)
    return " ".join(line.strip() for line in (text or type(err).__name__).splitlines()[:3])


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# --------------------------------------------------------------------------------------------------
# key walk


def _section_type(annotation: Any) -> type[Section] | None:
    """The Section class inside an annotation like ``Foo`` or ``Foo | None``."""
    if isinstance(annotation, type) and issubclass(annotation, Section):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _section_type(arg)
            if found is not None:
                return found
    return None


def check_keys(model: type[BaseModel], data: Any, prefix: str = "") -> tuple[Any, list[str]]:
    """Drop RLinf keys vlarl ignores (returned as dotted paths); raise on unknown keys with suggestions."""
    if not isinstance(data, dict):
        return data, []
    fields = model.model_fields
    ignored_names: frozenset[str] = getattr(model, "rlinf_ignored", frozenset())
    cleaned: dict[str, Any] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    switched_on: list[str] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key in fields:
            sub = _section_type(fields[key].annotation)
            if sub is not None and isinstance(value, dict):
                value, sub_ignored = check_keys(sub, value, f"{path}.")
                ignored.extend(sub_ignored)
            cleaned[key] = value
            continue
        features = unsupported.uses(path, value, data)
        if features:
            switched_on.extend(features)
        elif key in ignored_names or unsupported.feature_of(path) is not None:
            ignored.append(path)  # an RLinf key vlarl does not use, or an unsupported feature left off
        else:
            unknown.append(f'"{path}"{did_you_mean(key, list(fields))}')
    if switched_on:
        raise ConfigError(f"The config turns on RLinf feature(s) vlarl does not implement: {'; '.join(switched_on)}. "
                          f"{unsupported.SUPPORTED}.", unsupported.FIX)
    if unknown:
        where = prefix.rstrip(".") or "the top level"
        raise ConfigError(
            f"Unknown config key(s) {'; '.join(unknown)}. Keys known at {where}: {', '.join(fields)}.",
            "Fix the spelling, or remove the key.",
        )
    return cleaned, ignored


def format_validation_error(err: ValidationError) -> str:
    """One line per pydantic error: ``dotted.path: message (got value)``."""
    parts = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(x) for x in e["loc"] if not str(x).startswith("function-"))
        msg = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        shown = "" if isinstance(got, dict) or e["type"] == "value_error" else f" (got {got!r})"
        parts.append(f"{loc or 'config'}: {msg}{shown}")
    return "; ".join(parts)


def to_yaml(config: VlarlConfig) -> str:
    """The fully resolved config as YAML (what every run saves as ``config.yaml``)."""
    import yaml

    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, default_flow_style=None)
