"""Config dtype names -> torch's: the one table of the policy's loaders, TOPReward and the
config check (``policy.dtype``, ``reward.dtype``)."""

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}
