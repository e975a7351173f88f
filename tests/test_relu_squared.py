"""ReLU squared (Nemotron's relu2): forward and backward against a float64 reference and HF's
ReLUSquaredActivation, every dtype, odd and strided shapes, grad_output != 1; opcheck,
torch.compile(fullgraph=True), float64 gradcheck; the modules and the functional; errors."""

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from utils import assert_close_to_ref

import liger_cpp  # noqa: F401
from liger_cpp.ops.relu_squared import relu_squared
from liger_cpp.transformers import LigerReLUSquared, LigerReLUSquaredMLP, liger_relu_squared

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# odd sizes (the vector tail), one element, a 3-D activation
SHAPES = [(1,), (7,), (3, 129), (2, 9, 1000), (4, 4096)]
# (2048, 14336): an MLP activation of 2048 tokens, 29 M elements (8192 tokens, with the float64
# reference's copies ~5 GiB, ran out of memory beside the suite's other processes on the H200).
CUDA_SHAPES = [(2048, 14336), (3, 1_000_003), (1, 7)]


def _ref(x):
    return torch.relu(x).square()


def _dtypes(device):
    return DTYPES + ([torch.float64] if device == "cpu" else [])


def _case(device, dtype, shape, strided=False):
    x = torch.randn(shape, device=device, dtype=torch.float64) * 2
    if strided:  # a transposed (non-contiguous) view
        x = x.reshape(shape[-1], -1).t() if len(shape) > 1 else x
    x = x.to(dtype)
    g = torch.randn(x.shape, device=device, dtype=torch.float64).to(dtype)
    return x, g


def _check(x, g):
    xl = x.detach().clone().requires_grad_(True)
    y = relu_squared(xl)
    (dx,) = torch.autograd.grad(y, xl, g)
    x64 = x.detach().double().requires_grad_(True)
    y64 = _ref(x64)
    (dx64,) = torch.autograd.grad(y64, x64, g.double())
    xlo = x.detach().clone().requires_grad_(True)
    ylo = _ref(xlo)
    (dxlo,) = torch.autograd.grad(ylo, xlo, g)
    assert y.dtype == x.dtype and y.is_contiguous()
    assert_close_to_ref(y, y64, ylo, "y")
    assert_close_to_ref(dx, dx64, dxlo, "dx")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_backward(device, shape):
    for dtype in _dtypes(device):
        _check(*_case(device, dtype, shape))
        if len(shape) > 1:
            _check(*_case(device, dtype, shape, strided=True))


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
@pytest.mark.parametrize("shape", CUDA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_large_and_misaligned(shape, dtype):
    _check(*_case("cuda", dtype, shape))
    x, g = _case("cuda", dtype, (shape[-1] + 1,))
    _check(x[1:], g[1:])  # one element off 16-byte alignment: the scalar kernel


@pytest.mark.parametrize("device", DEVICES)
def test_equals_hf_activation(device):
    from transformers.activations import ACT2FN

    act = ACT2FN["relu2"]
    for dtype in _dtypes(device):
        x = (torch.randn(5, 77, device=device) * 3).to(dtype)
        torch.testing.assert_close(relu_squared(x), act(x), rtol=0, atol=0)  # one rounding, as HF's
        assert torch.equal(LigerReLUSquared()(x), liger_relu_squared(x))


def test_zero_and_negative_inputs_have_zero_gradient():
    x = torch.tensor([-3.0, -0.0, 0.0, 2.0], requires_grad=True)
    relu_squared(x).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 4.0]


def test_opcheck_compile_gradcheck():
    x = torch.randn(3, 17, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.liger.relu_squared_fwd, (x,))
    torch.library.opcheck(
        torch.ops.liger.relu_squared_bwd, (torch.randn(3, 17, dtype=torch.float64), x.detach())
    )
    assert torch.autograd.gradcheck(relu_squared, (x,))
    compiled = torch.compile(relu_squared, fullgraph=True)
    xf = torch.randn(4, 9)
    torch.testing.assert_close(compiled(xf), relu_squared(xf))


def test_nemotron_mlp_matches_hf():
    import transformers
    from hf_models import tiny_config

    cfg = tiny_config("nemotron")
    hf = transformers.models.nemotron.modeling_nemotron.NemotronMLP(cfg)
    ours = LigerReLUSquaredMLP(cfg)
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(2, 5, cfg.hidden_size)
    torch.testing.assert_close(ours(x), hf(x), rtol=1e-6, atol=1e-6)
    cfg.hidden_act = "silu"
    with pytest.raises(ValueError, match="relu2"):
        LigerReLUSquaredMLP(cfg)


def test_errors():
    with pytest.raises(RuntimeError, match="argument 'x': expected float32"):
        torch.ops.liger.relu_squared_fwd(torch.ones(3, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="argument 'dy': expected x's shape"):
        torch.ops.liger.relu_squared_bwd(torch.ones(4), torch.ones(3))
    with pytest.raises(RuntimeError, match="argument 'dy': expected x's dtype"):
        torch.ops.liger.relu_squared_bwd(torch.ones(3, dtype=torch.float64), torch.ones(3))
