"""Memory plan for the real sizes on the meta device (``make plan``, ``scripts/plan.py``)."""
