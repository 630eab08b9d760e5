"""The error a bad setting raises, the checks that raise it, and how a script reports it (a
leaf: every module may import it)."""

import os
import sys


class ConfigError(ValueError):
    """Bad configuration: the message names the key, the value and what to change."""


def require(key: str, value: object, ok: bool, allowed: str) -> None:
    """Raise ``ConfigError("<key>=<value> is not allowed: <allowed>")`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def require_positive(prefix: str, obj: object, *names: str, allow_zero: bool = False) -> None:
    """Each of ``obj``'s attributes ``names`` is > 0 (>= 0 with ``allow_zero``) or None."""
    for name in names:
        value = getattr(obj, name)
        if value is None:
            continue
        ok = value >= 0 if allow_zero else value > 0
        require(f"{prefix}.{name}", value, ok, "must be >= 0" if allow_zero else "must be > 0")


def require_choice(key: str, value: object, choices: tuple[str, ...] | list[str]) -> None:
    """``value`` is one of ``choices`` (the tuple the code defines)."""
    require(key, value, value in choices, f"one of {list(choices)}")


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
