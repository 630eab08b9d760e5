"""The error a bad setting raises, and the checks that raise it (a leaf: every module may
import it)."""


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
