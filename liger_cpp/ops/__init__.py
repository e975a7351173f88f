"""Fake (meta) registrations of the torch.ops.liger operators and the functional entry points that
call them. Autograd is in C++ (csrc/aten/autograd/; docs/adding_an_op.md)."""

from liger_cpp.ops.ce_tvd import fused_ce_tvd  # noqa: F401
from liger_cpp.ops.cross_entropy import cross_entropy  # noqa: F401
from liger_cpp.ops.divergence import jsd, kl_div, tvd  # noqa: F401,E402
from liger_cpp.ops.dyt import dyt  # noqa: F401
from liger_cpp.ops.fused_add_rms_norm import fused_add_rms_norm  # noqa: F401
from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy  # noqa: F401
from liger_cpp.ops.fused_linear_distillation import fused_linear_distillation  # noqa: F401,E402
from liger_cpp.ops.fused_linear_grpo import fused_linear_grpo  # noqa: F401,E402
from liger_cpp.ops.fused_linear_kl_div import fused_linear_kl_div  # noqa: F401,E402
from liger_cpp.ops.fused_linear_logprobs import (  # noqa: F401,E402
    LigerFusedLinearScaledCrossEntropyFunction,
    LigerFusedLinearScaledCrossEntropyTPFunction,
    fused_linear_token_logprobs,
)
from liger_cpp.ops.fused_linear_preference import fused_linear_preference  # noqa: F401
from liger_cpp.ops.geglu import geglu  # noqa: F401
from liger_cpp.ops.glu_mlp import glu_mlp, glu_mlp_tiled  # noqa: F401
from liger_cpp.ops.grpo_logits import grpo_loss_on_logits  # noqa: F401,E402
from liger_cpp.ops.layer_norm import layer_norm  # noqa: F401
from liger_cpp.ops.llama4_rope import llama4_rope  # noqa: F401
from liger_cpp.ops.moe_experts import moe_experts  # noqa: F401
from liger_cpp.ops.poly_norm import poly_norm  # noqa: F401
from liger_cpp.ops.qkv_rope import qkv_rope  # noqa: F401
from liger_cpp.ops.relu_squared import relu_squared  # noqa: F401
from liger_cpp.ops.rms_norm import rms_norm  # noqa: F401
from liger_cpp.ops.rope import mrope, rope  # noqa: F401
from liger_cpp.ops.selective_logprobs import fused_selective_log_softmax, selective_log_softmax  # noqa: F401
from liger_cpp.ops.swiglu import swiglu  # noqa: F401
from liger_cpp.ops.tiled_mlp import apply_tiled_mlp  # noqa: F401
