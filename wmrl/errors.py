"""The error a bad setting raises, the checks that raise it (``settings_of``: a config group
as its settings class, an unknown key refused), and how a script reports it (a leaf: every
module may import it)."""

import os
import sys
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """Bad configuration: the message names the key, the value and what to change."""


def require(key: str, value: object, ok: bool, allowed: str) -> None:
    """Raise ``ConfigError("<key>=<value> is not allowed: <allowed>")`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def require_positive(prefix: str, obj: object, *names: str, allow_zero: bool = False) -> None:
    """Each of ``obj``'s attributes ``names`` is > 0 (>= 0 with ``allow_zero``) or None; the
    key named is ``prefix.name`` (``name`` alone for an empty ``prefix``: a top-level key)."""
    for name in names:
        value = getattr(obj, name)
        if value is None:
            continue
        ok = value >= 0 if allow_zero else value > 0
        require(f"{prefix}.{name}" if prefix else name, value, ok,
                "must be >= 0" if allow_zero else "must be > 0")


def require_choice(key: str, value: object, choices: tuple[str, ...] | list[str]) -> None:
    """``value`` is one of ``choices`` (the tuple the code defines)."""
    require(key, value, value in choices, f"one of {list(choices)}")


def settings_of(cls: type[T], settings: T | Mapping[str, Any] | None, group: str) -> T:
    """``cls`` (a dataclass of settings, e.g. ``AlgorithmConfig``, ``RolloutConfig``) from
    itself, a mapping of its fields (a config group, a checkpoint's hyper-parameters, keyword
    arguments; ``_target_``, what the group builds, is ignored) or None (the defaults). What
    the mapping leaves out takes the default; a field whose default is a settings dataclass
    takes a mapping of its own, partial or whole; an unknown key is a ``ConfigError`` naming
    ``<group>.<key>`` and the class's fields."""
    if settings is None or isinstance(settings, cls):
        return settings or cls()
    values = {k: v for k, v in dict(settings).items() if k != "_target_"}
    names = sorted(f.name for f in fields(cls))
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ConfigError(f"{group}.{unknown[0]}: not a setting of the {group.split('.')[0]} "
                          f"({cls.__module__}.{cls.__qualname__}: {names})")
    for f in fields(cls):
        inner = f.default_factory
        if f.name in values and isinstance(inner, type) and is_dataclass(inner):
            values[f.name] = settings_of(inner, values[f.name], f"{group}.{f.name}")
    return cls(**values)


def exit_on_config_error(run, *args, **kwargs):
    """``run(*args, **kwargs)``; a ``ConfigError`` is one line on stderr and exit code 2, before
    anything long starts (``WMRL_FULL_ERROR=1`` re-raises it with the trace)."""
    try:
        return run(*args, **kwargs)
    except ConfigError as err:
        if os.environ.get("WMRL_FULL_ERROR") == "1":
            raise
        print(f"config error: {err} (WMRL_FULL_ERROR=1 shows the trace)", file=sys.stderr)
        sys.exit(2)


def one_line(err: BaseException, limit: int = 300) -> str:
    """An error as one line of at most ``limit`` characters: its first line (a library's
    paragraphs cut to their first), shortened with "..." (the whole text: WMRL_FULL_ERROR=1)."""
    text = (str(err).strip().splitlines() or [type(err).__name__])[0].strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."
