"""What ``scripts/plan.py`` plans: ``conf/fit.yaml`` with ``conf/experiment/real_size.yaml``
composed after the chosen experiment, under the user's overrides; and the report's options
(``+plan.<name>=...``), read by the one reader the full-size check's ``+check.<name>`` use too."""

from __future__ import annotations

from dataclasses import fields

from wmrl.build import to_container
from wmrl.config import compose_config
from wmrl.errors import ConfigError
from wmrl.plan.memory import PlanOptions

# The real sizes, appended to the defaults list after `experiment` (tabletop unless the user
# names one), so they override the experiment as command-line values would, and the user's own
# overrides (a key, or a group such as reward=topreward) still override them.
REAL_SIZE = "+experiment@_global_=real_size"


def compose(overrides: list[str] | tuple[str, ...] = ()):
    """The planned config, composed in-process (tests, the full-size check);
    ``scripts/plan.py`` goes through ``hydra.main`` with the same overrides."""
    return compose_config("fit", [REAL_SIZE, *overrides])


def options_from(cfg, key: str = "plan", options=PlanOptions):
    """The dataclass ``options`` from the optional ``key`` of ``cfg``
    (``+plan.prompt_tokens=128``; lists become tuples); an unknown name is refused naming the
    ones there are."""
    extra = to_container(cfg.get(key) or {})
    names = sorted(f.name for f in fields(options))
    unknown = sorted(set(extra) - set(names))
    if unknown:
        raise ConfigError(f"+{key}.{unknown[0]}: unknown; the options are {names}")
    return options(**{k: tuple(v) if isinstance(v, list) else v for k, v in extra.items()})
