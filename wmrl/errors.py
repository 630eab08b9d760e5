"""The error a bad setting raises (a leaf: every module may import it)."""


class ConfigError(ValueError):
    """Bad configuration: the message names the key, the value and what to change."""
