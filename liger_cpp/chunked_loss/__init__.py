"""Post-training losses fused with the lm_head and chunked (DPO, ORPO, CPO, SimPO, KTO).

Not implemented yet: this package reserves Liger's import path ``liger_cpp.chunked_loss``.
"""

__all__: list = []
