"""Model weights, whatever the model (policy, world model, reward): their dtypes, random
initial values, files and adapters. Nothing is imported here; the parts:

``dtypes.py``              the one dtype table (``bf16`` and ``bfloat16`` alike), from
                           ``strategies.dtypes``.
``safetensors_shards.py``  the one sharded-safetensors writer (shards + index, as
                           transformers and diffusers read them).
``random_weights.py``      random tensors at a checkpoint's shapes, one at a time (the
                           full-size synthetic checkpoints).
``lora.py``                LoRA through peft, the one adapter mechanism: added, merged,
                           synced to the actors, written as peft's own adapter folder.
"""
