"""ReLU squared (``liger_kernel.transformers.relu_squared``): LigerReLUSquared, the activation module
(Nemotron's relu2), and LigerReLUSquaredMLP, drop-in for HF's NemotronMLP."""

from torch import nn

from liger_cpp.ops.relu_squared import relu_squared


class LigerReLUSquared(nn.Module):
    """relu(x)^2 (HF's ReLUSquaredActivation, ACT2FN["relu2"]) with float32 math, one rounding."""

    def forward(self, x):
        return relu_squared(x)


def check_relu2(config) -> None:
    act = getattr(config, "hidden_act", None)
    if act != "relu2":
        raise ValueError(f"liger_cpp: config.hidden_act {act!r} is not supported; ReLU squared needs 'relu2'")


class LigerReLUSquaredMLP(nn.Module):
    """Nemotron's MLP (HF NemotronMLP): ``down_proj(relu(up_proj(x))^2)``, biases when config.mlp_bias."""

    def __init__(self, config):
        super().__init__()
        check_relu2(config)
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        bias = bool(getattr(config, "mlp_bias", False))
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=bias)

    def forward(self, x):
        return self.down_proj(relu_squared(self.up_proj(x)))
