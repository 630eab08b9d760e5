"""wmrl's view of the one dtype table (``strategies.dtypes``: strategies imports no wmrl, so
the table lives there): ``DTYPES`` maps every config name (``bf16`` and ``bfloat16`` alike) to
torch's name for it: the schema's choices, how a setting is written down and compared
(``AlgorithmConfig.optimizer_dtype``, ``wmrl.config.policy_config_diff``); a torch dtype
comes from ``to_dtype``."""

from strategies.dtypes import DTYPES as _TORCH_DTYPES
from strategies.dtypes import dtype_name, to_dtype

__all__ = ["DTYPES", "dtype_name", "to_dtype"]

DTYPES = {name: dtype_name(dt) for name, dt in _TORCH_DTYPES.items()}
