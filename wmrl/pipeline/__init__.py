"""The offline pipeline (run by ``scripts/``, never imported by the runtime): the importer of
RLinf's WoVR release (``rlinf/``, one module per artifact), behaviour cloning of the base policy (``sft.py``)
and a fit's result out of wmrl (``export.py``). It imports the runtime; nothing in ``wmrl``
imports it.
"""
