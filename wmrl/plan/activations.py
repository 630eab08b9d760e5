"""Working sets: the policy's activations by formula, the world model's and the reward's
traced on the meta device.

Notation (as in ``wmrl/plan/memory.py``): e bytes per element of the policy's parameter dtype,
b the micro-batch (``algorithm.micro_batch``), B the envs one env actor steps at once; h, I, a
the Llama hidden size, MLP size and heads, kv the width k and v reach SDPA with, s the sequence;
d, m a ViT block's width and MLP size, n its tokens over all images, Dv the projector's input
width, D its output.

Trainer activations, bytes autograd keeps for backward for one micro-batch (the per-layer count
of Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
redone for these layers: no dropout, fused SDPA (flash / memory-efficient) so no s^2 term;
tests/plan/test_activations.py checks both counts against what autograd saves on CPU's fused
SDPA):
  Llama layer, per token: e (6h + 2kv + 4I) + 4 (2h) + 8 + 4a
    e: each RMSNorm's normalised input (before its weight) and output = the q/k/v and MLP
       inputs (4h), roped q (h), k and v as SDPA gets them (kv each; = h, as transformers
       repeats grouped heads when a mask is given), the SDPA output = o_proj input (h),
       gate, SiLU(gate), up and the down_proj input (I each);
    4 (2h) + 8: the RMSNorms' float32 upcast inputs and rsqrt; 4a: the SDPA logsumexp.
  ViT block, per token: e (10d + 2m) with LayerScale (DINOv2), e (8d + 2m) without (SigLIP),
    + 4 heads (logsumexp) + 4e (LayerNorm mean/rstd); Prismatic runs depth - 1 blocks.
  projector, per patch: e (Dv + 8 Dv + 2 D); the rest (final norm, lm_head input) (4 + e) h.
Not counted: the attention mask (one [b, 1, 1, s] tensor shared by all layers; a kernel that
pads it per call adds < 0.3 GB at b = 32) and the 56 x 256 action logits.
s = patches (+ proprio) + ``plan.prompt_tokens`` (prompt incl. BOS, default 64: LIBERO
instructions in the OFT template tokenise to fewer) + chunk * action_dim (+ stop token).
Gradient checkpointing on: a layer keeps only its input (e h per token), plus the layer that
is recomputed in backward; off: every layer's activations. Both add one Llama layer's
activations as the backward working set.

Rollout policy, one forward's working set at batch B:
  e B [s (4h + 3I) + n (4d + 2m)] (a Llama layer's MLP, the largest ViT block). No KV cache:
  OFT decodes its 56 action tokens in one forward.

World model, the working set of one ``chunk_step``, TRACED on the meta device: encode the 4
condition frames after the cached anchor, the DiT forward (one per denoising step; each step's
working set is the same, so one step is traced), decode all 13 frames, at batch B and 256x256.
The trace counts the bytes of every tensor storage created and frees them when the last tensor
on the storage dies (``strategies/live_bytes.py``); its peak is the working set. No KV cache:
each step is a full forward over the latent tokens + the text and action context.
Reward: its working set traced as above on min(B chunk, reward.batch_size) frames.

World-model fine-tune, one training step at b clips, TRACED on the meta device with autograd
(``trace_world_model_training``): the uint8 clips [b, 13, H, W, 3] to [-1, 1], the VAE encode
(no grad; its peak is a transient), then ``FlowMatchObjective.wovr().loss`` (the DiT forward
over all 4 latent frames, autograd keeping what backward needs) and ``loss.backward()``. The
parameters' and buffers' storages are not counted (a Linear's saved transposed weight is the
weight; FSDP's gathered copies are counted in ``wmrl/plan/finetune.py``), and each parameter's
gradient is dropped as soon as it is accumulated (FSDP reduce-scatters it into the sharded
gradient, counted there), so the trace is the activations, their gradients and the kernels'
temporaries. On meta, SDPA would take the math path (float32 scores, s^2 per head); the trace
runs the memory-efficient kernel's op instead (``aten._scaled_dot_product_efficient_attention``,
which saves q, k, v, the output and the logsumexp, as CUDA's flash / efficient kernels do).
Gradient checkpointing (diffusers' ``enable_gradient_checkpointing``: torch's non-reentrant
checkpoint per DiT block) is traced as it runs: each block keeps its input, backward recomputes
one block at a time.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from strategies.live_bytes import LiveBytes
from wmrl.io.pixels import u8_to_unit_torch
from wmrl.rewards.resnet import frames_to_input
from wmrl.world_model.objective import FlowMatchObjective


@torch.no_grad()
def trace_world_model(model: nn.Module, batch: int, height: int, width: int,
                      condition_frames: int, chunk: int, action_dim: int = 7) -> dict[str, int]:
    """Bytes of one ``chunk_step``'s model calls at ``batch`` envs (fast path, meta device):
    ``anchor`` = the cached VAE encoder state of frame 0 (held for the episode), ``working`` =
    the peak above it while encoding the condition frames, denoising (one step: every step's
    working set is the same) and decoding all frames."""
    m = "meta"
    with LiveBytes() as live:
        frame0 = torch.zeros(batch, 3, 1, height, width, device=m)
        anchor = model.encode_anchor(frame0)
        del frame0
        held = live.live
        live.reset_peak()
        rest = torch.zeros(batch, 3, condition_frames - 1, height, width, device=m)
        cond = model.encode_with_anchor(anchor, rest)
        del rest
        h, w = model.latent_hw(height, width)
        noise = torch.zeros(batch, model.latent_channels, chunk // model.temporal_ratio, h, w,
                            device=m)
        actions = torch.zeros(batch, condition_frames + chunk, action_dim, device=m)
        new = model.generate(cond, actions, noise, 1)
        video = model.decode(torch.cat([cond, new], 2))
        del video
        peak = live.peak
    return {"anchor": held, "working": peak - held}


def _efficient_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                    scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` through the memory-efficient kernel's op, which has
    a meta kernel (the meta device's SDPA would take the math path)."""
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale)[0]


@contextlib.contextmanager
def efficient_sdpa():
    """``F.scaled_dot_product_attention`` = ``_efficient_sdpa`` inside the block."""
    sdpa = nn.functional.scaled_dot_product_attention
    nn.functional.scaled_dot_product_attention = _efficient_sdpa
    try:
        yield
    finally:
        nn.functional.scaled_dot_product_attention = sdpa


def _drop_grad(param: torch.Tensor) -> None:
    param.grad = None


def trace_world_model_training(model: nn.Module, batch: int, height: int, width: int,
                               frames: int, condition_frames: int,
                               action_dim: int = 7) -> dict[str, int]:
    """Bytes of one fine-tune step of ``model`` (on meta, its trainable parameters marked) at
    ``batch`` clips of ``frames`` frames (module docstring): ``encode`` the peak of the no-grad
    VAE encode, ``forward`` the peak of the DiT forward with the loss (``saved``: what is still
    live when it returns, the activations kept for backward), ``backward`` the peak of
    ``loss.backward()``; ``working`` = the largest of the three."""
    m = "meta"
    hooks = [p.register_post_accumulate_grad_hook(_drop_grad)
             for p in model.parameters() if p.requires_grad]
    try:
        with LiveBytes(ignore=[*model.parameters(), *model.buffers()]) as live, efficient_sdpa():
            u8 = torch.zeros(batch, frames, height, width, 3, dtype=torch.uint8, device=m)
            with torch.no_grad():  # as WorldModelFinetune._latents
                latents = model.encode(u8_to_unit_torch(u8).permute(0, 4, 1, 2, 3))
            del u8
            encode = live.peak
            live.reset_peak()
            actions = torch.zeros(batch, frames, action_dim, device=m)
            loss = FlowMatchObjective.wovr().loss(
                model, latents, actions, model.latent_frames(condition_frames),
                noise=torch.zeros_like(latents), timestep_ids=torch.zeros(batch, dtype=torch.long))
            forward, saved = live.peak, live.live
            live.reset_peak()
            loss.backward()
            backward = live.peak
            del loss
    finally:
        for h in hooks:
            h.remove()
    return {"encode": encode, "forward": forward, "saved": saved, "backward": backward,
            "working": max(encode, forward, backward)}


@torch.no_grad()
def trace_reward(model: nn.Module, frames: int, height: int, width: int,
                 image_size=None) -> int:
    """Peak bytes of scoring ``frames`` uint8 frames (input conversion + forward)."""
    with LiveBytes() as live:
        u8 = torch.zeros(frames, height, width, 3, dtype=torch.uint8, device="meta")
        x = frames_to_input(u8, image_size)
        model(x)
        return live.peak


def policy_dims(policy: nn.Module, prompt_tokens: int) -> dict[str, Any]:
    """The sizes the activation formulas need, read from the built policy."""
    tc = policy.text_config
    h, n_heads = tc.hidden_size, tc.num_attention_heads
    # k and v as SDPA saves them: transformers repeats grouped kv heads before SDPA when a mask
    # is passed (the policy always passes one), so they are h wide even for a GQA model
    kv = h
    vits = []
    vb = policy.vision_backbone
    for vit in (vb.featurizer, getattr(vb, "fused_featurizer", None)):
        if vit is None:
            continue
        blk = vit.blocks[0]
        vits.append(dict(d=vit.embed_dim, m=blk.mlp.fc1.out_features, heads=vit.cfg.num_heads,
                         blocks=vit.cfg.depth - 1, tokens=vit.num_patches + vit.num_prefix_tokens,
                         layerscale=bool(vit.cfg.init_values)))
    wm = policy.config["wmrl"]
    n_img = vb.num_images
    patches = policy.num_patches + (1 if policy.proprio_dim else 0)
    s = patches + prompt_tokens + policy.chunk * policy.action_dim + int(
        bool(wm["append_stop_token"]))
    proj = policy.projector
    proj_elems = proj.fc1.in_features + 2 * proj.fc1.out_features + 2 * proj.fc2.out_features
    return dict(h=h, I=tc.intermediate_size, L=tc.num_hidden_layers, a=n_heads, kv=kv, s=s,
                vits=vits, n_img=n_img, patches=policy.num_patches, proj_elems=proj_elems,
                e=next(policy.parameters()).element_size())


def llama_layer_bytes(d: dict, b: int) -> int:
    """Bytes one Llama decoder layer keeps for backward (module docstring)."""
    e, h, kv, i, a = d["e"], d["h"], d["kv"], d["I"], d["a"]
    return d["s"] * b * (e * (6 * h + 2 * kv + 4 * i) + 4 * 2 * h + 8 + 4 * a)


def vit_block_bytes(v: dict, e: int, b: int, n_img: int) -> int:
    """Bytes one ViT block keeps for backward over ``n_img`` images (module docstring)."""
    per_token = (e * ((10 if v["layerscale"] else 8) * v["d"] + 2 * v["m"]) + 4 * v["heads"]
                 + 4 * e)
    return per_token * v["tokens"] * b * n_img


def train_activation_bytes(d: dict, b: int, checkpointing: bool) -> dict[str, int]:
    """Activations of one micro-batch of ``b`` chunk-samples (module docstring)."""
    e, s, h = d["e"], d["s"], d["h"]
    layer = llama_layer_bytes(d, b)
    llm = d["L"] * (e * h * s * b if checkpointing else layer)
    vit = 0
    for v in d["vits"]:
        block = vit_block_bytes(v, e, b, d["n_img"])
        kept = e * v["d"] * v["tokens"] * b * d["n_img"] if checkpointing else block
        vit += v["blocks"] * kept + (block if checkpointing else 0)
    rest = e * d["proj_elems"] * d["patches"] * b + (4 + e) * h * s * b
    return {"llm": llm, "vision": vit, "rest": rest, "working": layer,
            "total": llm + vit + rest + layer, "seq": s}


def rollout_activation_bytes(d: dict, batch: int) -> int:
    """One rollout forward's working set at ``batch`` envs (module docstring)."""
    e, s = d["e"], d["s"]
    vit = max((v["tokens"] * d["n_img"] * (4 * v["d"] + 2 * v["m"]) for v in d["vits"]),
              default=0)
    return e * batch * (s * (4 * d["h"] + 3 * d["I"]) + vit)
