"""Command-line arguments declared once, as a dataclass with one docstring per field.

`add_dataclass_arguments` turns each field into `--field-name` with the field's docstring
as its help text; `load_config_file` reads the same fields from a TOML or JSON file, so a
run can be described by a file and overridden on the command line.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import pathlib
import textwrap
import tomllib
import typing


def field_docstrings(cls) -> dict[str, str]:
    """Attribute docstrings (a string literal right after `name: type = value`)."""
    source = textwrap.dedent(inspect.getsource(cls))
    body = ast.parse(source).body[0].body
    docs = {}
    for node, following in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {text!r}")


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, positional=()) -> None:
    docs = field_docstrings(cls)
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        origin = typing.get_origin(kind)
        if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        help_text = docs.get(field.name, "")
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        names = [field.name] if field.name in positional else ["--" + field.name.replace("_", "-")]
        kwargs = {"help": f"{help_text} (default: {default})", "default": argparse.SUPPRESS}
        if kind is bool:
            kwargs.update(type=_parse_bool, nargs="?", const=True, metavar="BOOL")
        elif kind in (int, float, str):
            kwargs["type"] = kind
        else:
            raise TypeError(f"unsupported field type {kind} for {field.name}")
        parser.add_argument(*names, **kwargs)


def shipped_recipes() -> dict[str, pathlib.Path]:
    """Training recipes installed with the package (hybridsim/data/recipes/NAME.toml)."""
    folder = pathlib.Path(__file__).resolve().parent / "data" / "recipes"
    if not folder.is_dir():  # running from a source tree: data/ sits next to the package
        folder = pathlib.Path(__file__).resolve().parent.parent / "data" / "recipes"
    return {p.stem: p for p in sorted(folder.glob("*.toml"))}


def resolve_config_path(name) -> pathlib.Path:
    """A file path, or the name of a shipped recipe such as `pong-cpu`."""
    path = pathlib.Path(name)
    if path.is_file():
        return path
    recipes = shipped_recipes()
    if str(name) in recipes:
        return recipes[str(name)]
    if path.is_dir():
        hint = (f"; to continue the run in it, run the command that started it again with "
                f"--resume (the same --log-dir {path} and settings)"
                if (path / "checkpoint.pt").is_file() else "")
        raise IsADirectoryError(f"--config {path}: is a directory; name a TOML or JSON config "
                                f"file or a shipped recipe ({', '.join(recipes)}){hint}")
    if path.exists():  # a FIFO or a device: reading it could block
        raise ValueError(f"--config {path}: not a regular file; name a TOML or JSON config file")
    raise FileNotFoundError(f"config file not found: {path} (nor a shipped recipe; "
                            f"recipes: {', '.join(recipes) or 'none installed'})")


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs) -> dict:
    """A JSON object whose keys are distinct (json takes the last of two silently; TOML refuses)."""
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(f"setting {key!r} is given twice")
        seen[key] = value
    return seen


def load_config_file(path) -> dict:
    path = resolve_config_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # TOML and JSON are UTF-8; say which file is not
        raise ValueError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start}); "
                         f"a config file is TOML or JSON") from None
    try:
        values = json.loads(text, object_pairs_hook=_no_duplicates) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, _DuplicateKey) as exc:
        raise ValueError(f"{path}: cannot parse config file: {exc}") from exc
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a config file holds a table of settings, got {type(values).__name__} "
                         f"{values!r:.40}")
    return values


def has_field_type(kind, value) -> bool:
    """Whether value fits a field of type kind (int, float, str, bool): a bool is no number
    (it is an int in Python), an int is a fine float."""
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_field_types(cls, values: dict, source) -> None:
    """Each value has its field's type: no truthiness for bools ("false" is not False), no
    truncated floats for ints (integral ones such as 5e7 are taken; ints are fine for floats)."""
    hints = typing.get_type_hints(cls)
    for name, value in list(values.items()):
        kind = hints[name]
        if kind is int and isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            values[name] = value = int(value)  # total_frames = 5e7 in TOML is a float; 1e300 stays one
        if kind not in (int, float, str, bool):
            continue  # optional or composite fields: the dataclass's own checks apply
        if not has_field_type(kind, value):
            article = "an" if kind is int else "a"
            raise ValueError(f"{source}: setting {name!r} must be {article} {kind.__name__}, got {value!r}")


def build_config(cls, namespace: argparse.Namespace, config_file_field: str = "config"):
    """Defaults < config file < command line; unknown keys in the file are an error."""
    values = {}
    cli = vars(namespace)
    config_file = cli.get(config_file_field)
    if config_file:
        from_file = load_config_file(config_file)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(from_file) - names)
        if unknown:
            raise ValueError(f"{config_file}: unknown settings {unknown}; valid: {sorted(names)}")
        if config_file_field in from_file:
            raise ValueError(f"{config_file}: a config file cannot name another config file "
                             f"({config_file_field} = {from_file[config_file_field]!r})")
        check_field_types(cls, from_file, config_file)
        values.update(from_file)
    values.update({k: v for k, v in cli.items() if k in {f.name for f in dataclasses.fields(cls)}})
    return cls(**values)
