"""Liger-Kernel's output classes: Hugging Face's causal-LM outputs with ``token_accuracy`` and
``predicted_tokens`` (what liger_cpp's patched forward returns when they are asked for)."""

from dataclasses import dataclass
from typing import Optional

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast, MoeCausalLMOutputWithPast

from liger_kernel._surface import complete


@dataclass
class LigerCausalLMOutputWithPast(CausalLMOutputWithPast):
    token_accuracy: Optional[torch.Tensor] = None
    predicted_tokens: Optional[torch.Tensor] = None


@dataclass
class LigerMoeCausalLMOutputWithPast(MoeCausalLMOutputWithPast):
    token_accuracy: Optional[torch.Tensor] = None
    predicted_tokens: Optional[torch.Tensor] = None


complete(globals())
