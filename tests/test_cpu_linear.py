"""wmrl.full_size_check.cpu_linear: bf16 linear layers on a CPU through float32 GEMMs give the stock bf16
layer's results and keep what it keeps for the backward."""

import copy

import pytest
import torch
from torch import nn

from wmrl.full_size_check import cpu_linear
from wmrl.full_size_check.cpu_linear import Float32GemmLinear, bf16_linears_in_float32


def layer(w: torch.Tensor, b: torch.Tensor | None, trained: bool = True) -> nn.Linear:
    lin = nn.Linear(w.shape[1], w.shape[0], bias=b is not None, dtype=w.dtype)
    with torch.no_grad():
        lin.weight.copy_(w)
        if b is not None:
            lin.bias.copy_(b)
    return lin.requires_grad_(trained)


def both(lin: nn.Linear) -> tuple[nn.Linear, nn.Linear]:
    """(the stock layer, a copy switched by bf16_linears_in_float32)."""
    ours = copy.deepcopy(lin)
    assert bf16_linears_in_float32(ours) == 1 and type(ours) is Float32GemmLinear
    return lin, ours


def forward_backward(lin: nn.Linear, x: torch.Tensor, autocast: bool = False):
    x = x.detach().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = lin(x)
    (y.float() ** 2).sum().backward()
    return y.detach(), x.grad, lin.weight.grad, lin.bias.grad


def test_hand_checked_forward_and_backward():
    # y = x W^T + b = [1*3 + 2*4 + 0.5, 1*5 + 2*6 - 1] = [11.5, 16]; L = sum y^2:
    # dy = 2y = [23, 32]; dx = dy W = [23*3 + 32*5, 23*4 + 32*6] = [229, 284]
    bf = torch.bfloat16
    _, lin = both(layer(torch.tensor([[3.0, 4.0], [5.0, 6.0]], dtype=bf),
                        torch.tensor([0.5, -1.0], dtype=bf)))
    x = torch.tensor([[1.0, 2.0]], dtype=bf, requires_grad=True)
    assert "_Bf16Linear" in type(lin(x).grad_fn).__name__  # the float32-GEMM path ran
    y, dx, dw, db = forward_backward(lin, x)
    assert y.dtype == torch.bfloat16 and y.tolist() == [[11.5, 16.0]]
    assert dx.tolist() == [[229.0, 284.0]]
    assert dw.tolist() == [[23.0, 46.0], [32.0, 64.0]]  # dy^T x
    assert db.tolist() == [23.0, 32.0]


def test_autocast_rounds_float32_inputs_to_bf16_and_returns_float32_gradients():
    # 1.001 is 1.0 in bf16 (8 significant bits): autocast computes 3 * 1.0, not 3.003
    _, lin = both(layer(torch.tensor([[3.0]]), torch.tensor([0.0])))
    y, dx, dw, db = forward_backward(lin, torch.tensor([[1.001]]), autocast=True)
    assert y.dtype == torch.bfloat16 and y.item() == 3.0
    assert dx.dtype == dw.dtype == torch.float32  # the master weights' own dtype
    assert dx.item() == 18.0 and dw.item() == 6.0 and db.item() == 6.0  # dy = 2 * 3


@pytest.mark.parametrize("autocast", [False, True])
def test_equals_the_stock_bf16_layer(autocast):
    g = torch.Generator().manual_seed(0)
    dtype = torch.float32 if autocast else torch.bfloat16
    stock, ours = both(layer((torch.randn(80, 96, generator=g) * 0.1).to(dtype),
                             torch.randn(80, generator=g).to(dtype)))
    x = torch.randn(2, 7, 96, generator=g).to(dtype)
    for s, o in zip(forward_backward(stock, x, autocast), forward_backward(ours, x, autocast)):
        assert s.dtype == o.dtype and s.shape == o.shape
        # the same roundings; only the order of the float32 sums may differ: <= 1 bf16 ulp
        torch.testing.assert_close(o.float(), s.float(), rtol=2 ** -7, atol=1e-3)


def test_weight_blocks_change_nothing(monkeypatch):
    g = torch.Generator().manual_seed(1)
    _, lin = both(layer(torch.randn(50, 32, generator=g).bfloat16(),
                        torch.randn(50, generator=g).bfloat16()))
    x = torch.randn(5, 32, generator=g).bfloat16()
    whole = forward_backward(lin, x)
    lin.zero_grad(set_to_none=True)
    monkeypatch.setattr(cpu_linear, "BLOCK", 7 * 32)  # 8 blocks of 7 rows, the last of 1
    blocked = forward_backward(lin, x)
    for a, c in zip(whole, blocked):
        assert torch.equal(a, c)


def saved(lin: nn.Linear, x: torch.Tensor) -> list:
    kept = []

    def pack(t):
        kept.append((t.dtype, t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lin(x)
    return sorted(kept, key=str)


@pytest.mark.parametrize("trained", [False, True])
def test_keeps_what_the_stock_layer_keeps(trained):
    """A frozen bf16 base (LoRA) keeps only its weight, a trained one its input too: no
    float32 copy is held between forward and backward."""
    stock, ours = both(layer(torch.randn(8, 16).bfloat16(), None, trained))
    x = torch.randn(4, 16).bfloat16().requires_grad_(True)
    assert saved(ours, x) == saved(stock, x)
    assert all(dtype == torch.bfloat16 for dtype, _ in saved(stock, x))


def test_float32_layers_and_other_devices_pass_through():
    stock, ours = both(nn.Linear(8, 4))
    x = torch.randn(3, 8, requires_grad=True)
    y = ours(x)
    assert y.dtype == torch.float32 and "Addmm" in type(y.grad_fn).__name__
    assert torch.equal(y, stock(x))
    _, meta = both(nn.Linear(8, 4, device="meta", dtype=torch.bfloat16))
    assert meta(torch.empty(2, 8, device="meta", dtype=torch.bfloat16)).shape == (2, 4)


def test_gradient_checkpointing_recomputes_through_the_same_layer():
    g = torch.Generator().manual_seed(2)
    block = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4)).bfloat16()
    assert bf16_linears_in_float32(block) == 2
    x = torch.randn(3, 16, generator=g).bfloat16().requires_grad_(True)
    plain = torch.autograd.grad(block(x).float().sum(), [x, block[0].weight])
    y = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
    y.float().sum().backward()
    assert torch.equal(x.grad, plain[0]) and torch.equal(block[0].weight.grad, plain[1])


def test_peft_lora_layers_are_switched_with_their_base():
    peft = pytest.importorskip("peft")
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4)).bfloat16()
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["0"]))
    # the LoRA layer's base and its A and B: 3, and the untouched second layer: 4
    assert bf16_linears_in_float32(lora) == 4
    assert type(lora.base_model.model[0].base_layer) is Float32GemmLinear


def test_mismatched_dtypes_fail_as_the_stock_layer_does():
    _, lin = both(nn.Linear(8, 4).bfloat16())
    with pytest.raises(RuntimeError):  # float32 input, bf16 weight, no autocast: a bug on a card
        lin(torch.randn(2, 8))
