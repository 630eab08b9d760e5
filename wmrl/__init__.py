"""wmrl: GRPO post-training of VLA robot policies inside a learned video world model."""

__version__ = "0.1.0"
