"""``wmrl/plan/activations.py``: the analytic activation counts are what autograd saves."""

import pytest
import torch

from wmrl.plan.activations import llama_layer_bytes, vit_block_bytes


def _saved_bytes(module, *args, outside=(), **kwargs):
    """Bytes of the tensor storages autograd saves for backward in ``module(*args)``:
    parameters and ``outside`` tensors (RoPE tables and the mask, shared by all layers) excluded.
    The input counts: in the stack it is made by the layer before, and only this layer saves it.
    """
    skip = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *outside]}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(*args, **kwargs)
    return sum(seen.values())


def test_llama_layer_formula_is_what_autograd_saves():
    """CPU's fused SDPA saves what CUDA's flash / memory-efficient kernels save (q, k, v, the
    output, logsumexp): the analytic per-layer count equals the measured bytes."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    h, i, heads, kv_heads, b, s = 64, 176, 4, 2, 2, 24
    cfg = LlamaConfig(hidden_size=h, intermediate_size=i, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, vocab_size=100)
    cfg._attn_implementation = "sdpa"
    layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(s)[None].expand(b, -1)
    cos, sin = (t.detach() for t in LlamaRotaryEmbedding(cfg)(x, pos))
    mask = torch.zeros(b, 1, 1, s, dtype=torch.bfloat16).expand(b, 1, s, s)  # as the policy's
    got = _saved_bytes(layer, x, attention_mask=mask, position_ids=pos,
                       position_embeddings=(cos, sin), outside=(cos, sin, mask))
    # grouped kv heads reach SDPA repeated to h (a mask is given), so kv = h
    assert got == llama_layer_bytes(dict(e=2, h=h, kv=h, I=i, a=heads, s=s), b)


@pytest.mark.parametrize("layerscale", [1e-5, None])
def test_vit_block_formula_is_what_autograd_saves(layerscale):
    from wmrl.policies.vit import Block, ViTConfig

    cfg = ViTConfig(img_size=16, patch_size=8, embed_dim=32, depth=2, num_heads=4,
                    init_values=layerscale, mlp_ratio=3.7362)
    block = Block(cfg).to(torch.bfloat16)
    n, b = 6, 2
    x = torch.randn(b, n, 32, dtype=torch.bfloat16, requires_grad=True)
    v = dict(d=32, m=block.mlp.fc1.out_features, heads=4, tokens=n, layerscale=bool(layerscale))
    assert _saved_bytes(block, x) == vit_block_bytes(v, 2, b, 1)
