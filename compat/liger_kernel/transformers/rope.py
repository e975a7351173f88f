"""Liger-Kernel's ``liger_kernel.transformers.rope``: the RoPE replacements, on liger_cpp's rope."""

from liger_cpp.transformers.rope import (  # noqa: F401
    liger_rotary_pos_emb,
    liger_rotary_pos_emb_gpt_oss,
    liger_rotary_pos_emb_vision,
)
from liger_kernel._surface import complete

__all__ = ["liger_rotary_pos_emb", "liger_rotary_pos_emb_gpt_oss", "liger_rotary_pos_emb_vision"]
complete(globals())
