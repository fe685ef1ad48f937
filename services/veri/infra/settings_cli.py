"""A service's command-line flags, generated from its settings class: each knob is declared once.

The pydantic-settings class (services/proxy/settings.py, services/launcher/settings.py) holds a knob's type, default,
bounds and description; `add_settings_flags` turns its fields into argparse flags whose help says the
default and the environment variable, and `settings_from_flags` builds the settings from the flags a
user gave, so every knob not given on the command line comes from its `<PREFIX><FIELD>` variable, then
its default (a flag wins over the variable; a KEY=VALUE flag adds its pairs to the variable's JSON
object, as pydantic-settings merges them). Nothing is restated, so a flag, its variable and the
documentation (docs/cli.md is generated from the parsers) cannot drift apart.
"""

from __future__ import annotations

import argparse
import enum
import json
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

SettingsT = TypeVar("SettingsT", bound=BaseSettings)


class SettingsError(ValueError):
    """Settings a user gave (a flag or a variable) that the service cannot take: one line per problem."""


def flag_of(name: str, rename: Mapping[str, str]) -> str:
    return rename.get(name, "--" + name.replace("_", "-"))


def env_of(settings: type[BaseSettings], name: str) -> str:
    return (settings.model_config.get("env_prefix", "") + name).upper()


def add_settings_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, settings: type[BaseSettings], *,
                       names: Iterable[str] | None = None, exclude: Iterable[str] = (),
                       rename: Mapping[str, str] = {}, metavars: Mapping[str, str] = {}) -> None:
    """One flag per field of `settings` (those in `names`, else all but `exclude`). Flags left out keep
    no value in the namespace (argparse.SUPPRESS), so the variable or the default decides."""
    excluded = set(exclude)
    for name in names if names is not None else settings.model_fields:
        if name in excluded:
            continue
        field = settings.model_fields[name]
        kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS,
                                  "help": _help(field, env_of(settings, name))}
        kwargs.update(_kind(field.annotation, field.examples))
        if name in metavars:
            kwargs["metavar"] = metavars[name]
        parser.add_argument(flag_of(name, rename), **kwargs)


def settings_from_flags(settings: type[SettingsT], args: argparse.Namespace, *, rename: Mapping[str, str] = {},
                        **given: Any) -> SettingsT:
    """The settings from the flags in `args` that were given (and `given`, which wins), the rest from the
    environment and the defaults; a value pydantic refuses is a SettingsError naming the flag and variable."""
    values = {name: getattr(args, name) for name in settings.model_fields if hasattr(args, name)}
    values.update(given)
    try:
        return settings(**values)
    except ValidationError as error:
        raise SettingsError("; ".join(_problem(settings, issue, rename) for issue in error.errors())) from None


def _problem(settings: type[BaseSettings], issue: Mapping[str, Any], rename: Mapping[str, str]) -> str:
    location = issue.get("loc") or ()
    name = str(location[0]) if location else ""
    if name not in settings.model_fields:
        return issue["msg"]
    return f"{flag_of(name, rename)} (or ${env_of(settings, name)}): {issue['msg']}"


def _help(field: FieldInfo, env: str) -> str:
    default = field.get_default(call_default_factory=True)
    shown = "none" if default is None or default == {} or default == [] else (
        default.value if isinstance(default, enum.Enum) else default)
    text = field.description or ""
    required = field.is_required()
    return f"{text} ({'required' if required else f'default {shown}'}; ${env})".replace("%", "%%").lstrip()


def _kind(annotation: Any, examples: list[Any] | None = None) -> dict[str, Any]:
    """argparse's type/choices/action for a field's annotation (X | None reads as X)."""
    origin, arguments = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        inner = [argument for argument in arguments if argument is not type(None)]
        if len(inner) == 1:
            return _kind(inner[0], examples)
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is Literal:
        return {"choices": list(arguments), "type": type(arguments[0])}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"choices": [member.value for member in annotation]}
    if origin is list:
        return {"action": "append", "type": _scalar(arguments[0] if arguments else str)}
    if origin is dict:
        value_type = arguments[1] if len(arguments) == 2 else Any
        if value_type is str:
            example = next((f"{key}={item}" for key, item in (examples[0] if examples else {}).items()), "")
            return {"action": _KeyValue, "metavar": "KEY=VALUE", "example": example}
        example = json.dumps(examples[0]) if examples else '{"key": 1}'
        return {"type": _json_object(example), "metavar": "JSON"}
    return {"type": _scalar(annotation), "metavar": _METAVARS.get(annotation, "TEXT")}


_METAVARS = {int: "N", float: "X", Path: "PATH", str: "TEXT"}


def _scalar(annotation: Any) -> Callable[[str], Any]:
    return annotation if annotation in (int, float, str, Path) else str


def _json_object(example: str) -> Callable[[str], dict]:
    def parse(text: str) -> dict:
        if not text.strip():
            return {}
        try:
            value = json.loads(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"not JSON ({error}): pass an object like '{example}'") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"must be a JSON object, like '{example}'")
        return value

    return parse


class _KeyValue(argparse.Action):
    """A repeatable KEY=VALUE flag collected into one dict (a dict[str, str] field)."""

    def __init__(self, *args, example: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.example = example

    def __call__(self, parser, namespace, value, option_string=None):
        key, sep, item = str(value).partition("=")
        if not sep or not key:
            parser.error(f"{option_string} {value!r} is not {self.metavar}"
                         + (f", e.g. {self.example}" if self.example else ""))
        collected = dict(getattr(namespace, self.dest, None) or {})
        collected[key] = item
        setattr(namespace, self.dest, collected)
