"""OpenVLA-OFT policy (Prismatic DINOv2+SigLIP -> MLP projector -> Llama-2) with parallel decoding.

One forward pass decodes the whole chunk: the sequence is
``[BOS, image patches (+ proprio token), prompt tokens, 56 zero-embedded action placeholders
(, stop token)]`` under *bidirectional* attention (padding-only mask). The logits that predict
action k are read at the position before it (the last prompt token for k = 0), restricted to the
256 action ids, as in openvla-oft's ``predict_action`` and RLinf's ``default_forward``.

Configs (``tiny_config``, ``openvla_7b_config``, the wmrl settings) are in
``wmrl.policies.configs``; the checkpoint layout, read and written, in
``wmrl.policies.checkpoint``. ``build_policy`` is the Hydra ``_target_``.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from strategies.fused import apply_fused_ops, fused_ops_config
from wmrl.interfaces import PolicySample
from wmrl.policies import action_tokenizer as at
from wmrl.policies.checkpoint import (
    is_policy_dir,
    load_safetensors_dir,
    read_pretrained_config,
    write_pretrained,
)
from wmrl.policies.configs import openvla_7b_config, resolve_config, tiny_config
from wmrl.policies.text_tokenizer import PromptEncoder, build_tiny_tokenizer, load_tokenizer
from wmrl.policies.vit import Block, VisionTransformer, ViTConfig, vit_config_for
from wmrl.weights.dtypes import to_dtype
from wmrl.weights.lora import add_lora
from wmrl.weights.random_weights import random_tensors

# OpenVLA-OFT decodes in parallel with a 4-D bidirectional mask: the backends that honour it
SUPPORTED_ATTN = ("eager", "sdpa")
# RLinf's LoRA targets for OpenVLA-OFT (rlinf/models/__init__.py): the vision towers' proj /
# qkv / fc1 / fc2, the projector's fc1-3 (and a MAP head's q / kv / out_proj), every Llama
# projection and lm_head. peft matches them as suffixes of module names.
LORA_TARGETS = ("proj", "qkv", "fc1", "fc2", "q", "kv", "fc3", "out_proj", "q_proj", "k_proj",
                "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


class PrismaticVisionBackbone(nn.Module):
    """``featurizer`` (DINOv2) and, when fused, ``fused_featurizer`` (SigLIP); patch features of
    the two are concatenated along channels, images along tokens."""

    def __init__(self, vit_cfgs: list[ViTConfig], fused: bool, num_images: int):
        super().__init__()
        self.featurizer = VisionTransformer(vit_cfgs[0])
        self.embed_dim = self.featurizer.embed_dim
        self.fused = fused
        if fused:
            self.fused_featurizer = VisionTransformer(vit_cfgs[1])
            self.embed_dim += self.fused_featurizer.embed_dim
        self.num_images = num_images

    def forward(self, pixels: list[torch.Tensor]) -> torch.Tensor:
        """pixels: per image, a list of per-featurizer tensors [B, 3, S, S]."""
        out = []
        for per_feat in pixels:
            f = self.featurizer(per_feat[0])
            if self.fused:
                f = torch.cat([f, self.fused_featurizer(per_feat[1])], dim=2)
            out.append(f)
        return torch.cat(out, dim=1)


class PrismaticProjector(nn.Module):
    """Fused: fc1 (Dv->4Dv) GELU fc2 (4Dv->D) GELU fc3 (D->D); single: fc1 GELU fc2."""

    def __init__(self, fused: bool, vision_dim: int, llm_dim: int):
        super().__init__()
        self.fused = fused
        if fused:
            self.fc1 = nn.Linear(vision_dim, 4 * vision_dim)
            self.fc2 = nn.Linear(4 * vision_dim, llm_dim)
            self.fc3 = nn.Linear(llm_dim, llm_dim)
        else:
            self.fc1 = nn.Linear(vision_dim, llm_dim)
            self.fc2 = nn.Linear(llm_dim, llm_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc2(F.gelu(self.fc1(x)))
        return self.fc3(F.gelu(x)) if self.fused else x


class ProprioProjector(nn.Module):
    """OFT's proprio token: fc1 (P->D) GELU fc2 (D->D)."""

    def __init__(self, proprio_dim: int, llm_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(proprio_dim, llm_dim)
        self.fc2 = nn.Linear(llm_dim, llm_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class OpenVLAOFTPolicy(nn.Module):
    """``Policy`` (wmrl.interfaces): ``sample`` / ``log_probs`` over 8x7 action-bin tokens."""

    def __init__(self, config: dict, tokenizer=None, unnorm_key: str | None = None,
                 attn_implementation: str = "sdpa",
                 check_stats: bool = True):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        self.config, wm = resolve_config(config)
        cfg = self.config
        self.chunk, self.action_dim = int(wm["chunk"]), int(wm["action_dim"])
        self.n_bins = int(cfg["n_action_bins"])
        tc = dict(cfg["text_config"])
        for k in ("model_type", "torch_dtype", "dtype"):  # dtype is set by the `dtype` argument
            tc.pop(k, None)
        self.text_config = LlamaConfig(**tc)
        self.vocab_base = self.text_config.vocab_size - int(cfg["pad_to_multiple_of"])
        if self.vocab_base < self.n_bins:
            raise ValueError(f"text_config.vocab_size - pad_to_multiple_of = {self.vocab_base} "
                             f"< n_action_bins {self.n_bins}")
        fused = bool(cfg.get("use_fused_vision_backbone", True))
        if wm["vision_configs"]:
            vit_cfgs = [ViTConfig(**v) for v in wm["vision_configs"]]
        else:
            vit_cfgs = [vit_config_for(t, s) for t, s in
                        zip(cfg["timm_model_ids"], cfg["image_sizes"])]
        self.image_sizes = [v.img_size for v in vit_cfgs]
        n_img = int(wm["num_images_in_input"])
        self.vision_backbone = PrismaticVisionBackbone(vit_cfgs, fused, n_img)
        llm_dim = self.text_config.hidden_size
        self.projector = PrismaticProjector(fused, self.vision_backbone.embed_dim, llm_dim)
        self.proprio_dim = int(wm["proprio_dim"])
        if self.proprio_dim:
            self.proprio_projector = ProprioProjector(self.proprio_dim, llm_dim)
        self.language_model = LlamaForCausalLM._from_config(
            self.text_config, attn_implementation=attn_implementation)
        self.num_patches = n_img * self.vision_backbone.featurizer.num_patches
        self.fsdp_wrap_classes = (type(self.language_model.model.layers[0]), Block)
        self.tokenizer = tokenizer
        self.prompt = PromptEncoder(tokenizer, wm["empty_token_id"]) if tokenizer else None
        self.unnorm_key = unnorm_key
        self._stats = None
        if check_stats:
            _ = self.stats  # fail early on a missing / wrong unnorm_key
        self._attn_checked = False
        self.fused_ops_report = None  # build_policy(fused_ops=...): strategies.FusedOpsReport
        self.register_buffer("_mean", torch.tensor(wm["image_means"][: 1 + fused]).view(
            -1, 3, 1, 1), persistent=False)
        self.register_buffer("_std", torch.tensor(wm["image_stds"][: 1 + fused]).view(
            -1, 3, 1, 1), persistent=False)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: dict | None = None, tokenizer=None, seed: int | None = 0,
                    **kw) -> OpenVLAOFTPolicy:
        """Random weights (tiny by default); builds the tiny offline tokenizer if none given."""
        config = config or tiny_config()
        if seed is not None:
            torch.manual_seed(seed)
        if tokenizer is None:
            tc = config["text_config"]
            tokenizer = build_tiny_tokenizer(int(tc["vocab_size"]) - int(config["pad_to_multiple_of"]))
        return cls(config, tokenizer=tokenizer, **kw)

    @classmethod
    def from_pretrained(cls, path: str, unnorm_key: str | None = None,
                        dtype: torch.dtype | str = "float32",
                        attn_implementation: str = "sdpa",
                        overrides: dict | None = None,
                        ignore_key_prefixes: tuple[str, ...] = ()) -> OpenVLAOFTPolicy:
        """Load the published OpenVLA-OFT / RLinf layout from a local directory."""
        config = read_pretrained_config(path, overrides)
        dtype = to_dtype(dtype, "policy.dtype")
        tokenizer = load_tokenizer(path)
        with torch.device("meta"):  # no 7B random init: allocate, then copy the checkpoint in
            model = cls(config, tokenizer=tokenizer, unnorm_key=unnorm_key,
                        attn_implementation=attn_implementation)
        model = model.to(dtype).to_empty(device="cpu")
        model._reset_buffers()
        load_safetensors_dir(model, path, ignore_key_prefixes)
        return model

    def _reset_buffers(self) -> None:
        """Non-persistent buffers (RoPE frequencies, pixel stats) after a meta-device build."""
        rope = self.language_model.model.rotary_emb
        self.language_model.model.rotary_emb = type(rope)(config=self.language_model.config)
        wm = self.config["wmrl"]
        k = 1 + self.vision_backbone.fused
        self._mean = torch.tensor(wm["image_means"][:k]).view(-1, 3, 1, 1)
        self._std = torch.tensor(wm["image_stds"][:k]).view(-1, 3, 1, 1)

    def save_pretrained(self, path: str, max_shard_bytes: int = 5 * 2**30) -> None:
        """Write the upstream layout atomically (``checkpoint.write_pretrained``)."""
        write_pretrained(path, self.config, self.state_dict(), self.tokenizer, max_shard_bytes)

    # ---- switches -----------------------------------------------------------------------
    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        for vit in (self.vision_backbone.featurizer, getattr(self.vision_backbone,
                                                              "fused_featurizer", None)):
            if vit is not None:
                vit.gradient_checkpointing = enabled
        lm = self.language_model
        if hasattr(lm, "activation_checkpointing_enable"):  # transformers >= 5.x name
            on, off, kw = (lm.activation_checkpointing_enable, lm.activation_checkpointing_disable,
                           "activation_checkpointing_kwargs")
        else:
            on, off, kw = (lm.gradient_checkpointing_enable, lm.gradient_checkpointing_disable,
                           "gradient_checkpointing_kwargs")
        if enabled:
            on(**{kw: {"use_reentrant": False}})
        else:
            off()

    @property
    def stats(self) -> at.ActionStats:
        if self._stats is None:
            self._stats = at.ActionStats(self.config.get("norm_stats") or {}, self.unnorm_key,
                                         self.action_dim)
        return self._stats

    # ---- attention check ----------------------------------------------------------------
    def check_bidirectional(self) -> None:
        """Refuse backends that would apply a causal mask (flash_attention_2 and flex ignore or
        rewrite 4-D masks). One-time probe: the first position must see the last one."""
        impl = self.language_model.config._attn_implementation
        if impl not in SUPPORTED_ATTN:
            raise RuntimeError(
                f"attention backend {impl!r} cannot run OpenVLA-OFT's bidirectional parallel "
                f"decoding (it ignores the 4-D padding-only mask and applies a causal one); "
                f"set attn_implementation to one of {SUPPORTED_ATTN}")
        if self._attn_checked:
            return
        p = next(self.language_model.parameters())
        with torch.no_grad():
            g = torch.Generator().manual_seed(0)
            x = torch.randn(1, 3, self.text_config.hidden_size, generator=g).to(p)
            y = x.clone()
            y[:, -1] += 1.0
            mask = torch.zeros(1, 1, 3, 3, dtype=p.dtype, device=p.device)
            pos = torch.arange(3, device=p.device)[None]
            outs = [self.language_model.model(inputs_embeds=e, attention_mask=mask,
                                              position_ids=pos, use_cache=False)
                    .last_hidden_state[:, 0] for e in (x, y)]
        if torch.equal(outs[0], outs[1]):
            raise RuntimeError(
                f"attention backend {impl!r} applied a causal mask despite the 4-D padding-only "
                "mask; OpenVLA-OFT needs bidirectional attention (use eager or sdpa)")
        self._attn_checked = True

    # ---- forward ------------------------------------------------------------------------
    def _pixels(self, image: torch.Tensor) -> list[torch.Tensor]:
        """uint8 [B, H, W, 3] -> per featurizer, normalised float [B, 3, S, S].

        Resized as RLinf's processor does (``resize_like_rlinf``: bicubic, antialiased, rounded
        back to uint8 values, e.g. 256 -> 224), then /255 and normalised. ``center_crop`` (off
        by default, as RLinf's LIBERO rollout) crops 90% of the area and resizes back."""
        if image.dtype != torch.uint8 or image.ndim != 4 or image.shape[-1] != 3:
            raise ValueError(f"obs image must be uint8 [B, H, W, 3], got {image.dtype} "
                             f"{tuple(image.shape)}")
        x = image.to(self._mean.device).permute(0, 3, 1, 2).float()  # uint8 values, 0..255
        out = []
        for i, s in enumerate(self.image_sizes[: len(self._mean)]):
            y = resize_like_rlinf(x, s)
            if self.config["wmrl"]["center_crop"]:
                c = int(round(s * math.sqrt(0.9)))
                o = (s - c) // 2
                y = resize_like_rlinf(y[..., o : o + c, o : o + c], s)
            out.append((y / 255.0 - self._mean[i].float()) / self._std[i].float())
        return out

    def _prefix_embeddings(self, obs: dict) -> torch.Tensor:
        images = [obs["image"]]
        if self.vision_backbone.num_images > 1:
            if "wrist_image" not in obs:
                raise KeyError("num_images_in_input=2 needs obs['wrist_image'] uint8 [B,H,W,3]")
            images.append(obs["wrist_image"])
        p = next(self.projector.parameters())
        pix = [[t.to(p.dtype) for t in self._pixels(im)] for im in images]
        emb = self.projector(self.vision_backbone(pix))
        if self.proprio_dim:
            if "state" not in obs:
                raise KeyError(f"proprio_dim={self.proprio_dim} needs obs['state'] [B, P]")
            state = torch.as_tensor(obs["state"], device=p.device, dtype=p.dtype)
            emb = torch.cat([emb, self.proprio_projector(state)[:, None]], dim=1)
        return emb

    def action_logits(self, obs: dict) -> torch.Tensor:
        """Bin logits [B, chunk*action_dim, n_bins] (float32) from one bidirectional forward."""
        self.check_bidirectional()
        if self.prompt is None:
            raise RuntimeError("policy has no tokenizer: build it with from_config/from_pretrained")
        tasks = list(obs["task"])
        b = obs["image"].shape[0]
        if len(tasks) != b:
            raise ValueError(f"obs['task'] has {len(tasks)} entries for {b} images")
        wm = self.config["wmrl"]
        n_act = self.chunk * self.action_dim
        prefix = self._prefix_embeddings(obs)  # [B, P, D]
        dev, dt = prefix.device, prefix.dtype
        ids, tmask = self.prompt(tasks, device=dev)  # left-padded [B, T]
        embed = self.language_model.get_input_embeddings()
        text = embed(ids)
        tail = [torch.zeros(b, n_act, text.shape[-1], device=dev, dtype=dt)]  # zeroed placeholders
        if wm["append_stop_token"]:
            tail.append(embed(torch.full((b, 1), wm["stop_token_id"], device=dev)))
        # Tensor layout [patches, text, actions(, stop)]; position ids reproduce the upstream
        # order [BOS, patches, text[1:], actions(, stop)] (RoPE sees positions, attention is
        # bidirectional, so the tensor order does not matter).
        seq = torch.cat([prefix, text, *tail], dim=1)
        n_pre, t = prefix.shape[1], text.shape[1]
        n_tail = seq.shape[1] - n_pre - t
        tlen = tmask.sum(1, keepdim=True)  # real text tokens incl. BOS
        rank = tmask.long().cumsum(1) - 1  # 0 for BOS
        text_pos = torch.where(rank == 0, torch.zeros_like(rank), rank + n_pre).clamp(min=0)
        pre_pos = torch.arange(1, n_pre + 1, device=dev).expand(b, -1)
        tail_pos = n_pre + tlen + torch.arange(n_tail, device=dev)[None]
        pos = torch.cat([pre_pos, text_pos, tail_pos], dim=1)
        keep = torch.cat([torch.ones(b, n_pre, dtype=torch.bool, device=dev), tmask,
                          torch.ones(b, n_tail, dtype=torch.bool, device=dev)], dim=1)
        # 4-D additive padding-only mask: every query sees every real key (no causal part).
        mask = torch.zeros(b, 1, 1, seq.shape[1], device=dev, dtype=dt)
        mask = mask.masked_fill(~keep[:, None, None, :], torch.finfo(dt).min)
        mask = mask.expand(b, 1, seq.shape[1], seq.shape[1])
        hidden = self.language_model.model(inputs_embeds=seq, attention_mask=mask,
                                           position_ids=pos, use_cache=False).last_hidden_state
        start = n_pre + t - 1  # last prompt token predicts action 0
        h = hidden[:, start : start + n_act]
        first = self.vocab_base - self.n_bins  # only the action ids' rows of the head
        head = self.language_model.lm_head
        if isinstance(head, nn.Linear):
            logits = F.linear(h, head.weight[first: self.vocab_base])
        else:  # wrapped by a LoRA adapter (wmrl.weights.lora): the whole head, then those rows
            logits = head(h)[..., first: self.vocab_base]
        return at.bin_logits(logits.float(), self.vocab_base, self.n_bins, first_id=first)

    @torch.no_grad()
    def sample(self, obs: dict, temperature: float = 1.6,
               generator: torch.Generator | None = None) -> PolicySample:
        """Sample 56 bins at ``temperature`` (0 = greedy, log-probs then at T = 1)."""
        logits = self.action_logits(obs)
        b, n, _ = logits.shape
        top_k = int(self.config["wmrl"]["top_k"])
        if temperature == 0:
            logp = at.process_logits(logits, 1.0, top_k)
            bins = logp.argmax(-1)
        else:
            logp = at.process_logits(logits, temperature, top_k)
            flat = logp.exp().reshape(b * n, -1)
            if generator is not None and generator.device != flat.device:
                flat = flat.to(generator.device)  # e.g. a CPU generator for a CUDA policy
            bins = torch.multinomial(flat, 1, generator=generator).view(b, n).to(logp.device)
        lp = logp.gather(-1, bins[..., None])[..., 0]
        actions = self.stats.decode(bins.view(b, self.chunk, self.action_dim), self.n_bins,
                                    self.config["wmrl"]["gripper"])
        return PolicySample(tokens=bins, actions=actions, logprobs=lp)

    def log_probs(self, obs: dict, tokens: torch.Tensor, temperature: float = 1.6,
                  return_entropy: bool = False):
        """Differentiable log pi(tokens) [B, L] (and entropy [B, L]) at ``temperature``."""
        logits = self.action_logits(obs)
        if tokens.shape != logits.shape[:2]:
            raise ValueError(f"tokens must be [B, {logits.shape[1]}], got {tuple(tokens.shape)}")
        if tokens.min() < 0 or tokens.max() >= self.n_bins:
            raise ValueError(f"tokens must be bin indices in [0, {self.n_bins})")
        logp = at.process_logits(logits, temperature, int(self.config["wmrl"]["top_k"]))
        lp = logp.gather(-1, tokens.to(logp.device).long()[..., None])[..., 0]
        return (lp, at.entropy_from_logprobs(logp)) if return_entropy else lp


def resize_like_rlinf(x: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 values as float [B, 3, H, W] -> [B, 3, size, size], rounded back to uint8 values.

    As RLinf's Prismatic processor (torchvision ``resize`` of the uint8 tensor, bicubic,
    antialiased): interpolate in float32, round half to even, clamp to [0, 255]; the caller then
    divides by 255 and normalises. Same size: returned unchanged."""
    if x.shape[-2:] == (size, size):
        return x
    y = F.interpolate(x, size=(size, size), mode="bicubic", antialias=True, align_corners=False)
    return y.round().clamp(0, 255)


def build_policy(pretrained_path: str | None = None, config: dict | None = None,
                 unnorm_key: str | None = None,
                 dtype: str = "float32",
                 gradient_checkpointing: bool = False,
                 attn_implementation: str = "sdpa",
                 overrides: dict | None = None, seed: int = 0,
                 ignore_key_prefixes: list[str] | tuple[str, ...] = (),
                 fused_ops: bool | str | None = False,
                 lora: dict | None = None) -> OpenVLAOFTPolicy:
    """Hydra ``_target_``: load ``pretrained_path`` if given, else random weights from ``config``
    (a plain dict, picklable for Ray workers; None = the tiny config). ``overrides`` update the
    ``wmrl`` settings; ``ignore_key_prefixes`` skips checkpoint keys the policy does not use
    (e.g. ``["value_head."]`` of an RLinf PPO actor).

    ``fused_ops``: false (default) keeps the eager Llama; ``auto`` (or true) swaps its RMSNorms
    and rotary embedding for the fused kernels of this process's device family (npu:
    ``torch_npu.npu_rms_norm`` / ``npu_rotary_mul``; cuda, cpu: ``F.rms_norm``, eager rotary);
    a device type (``npu``, ``cuda``, ``cpu``) picks that family's kernels. Tensors on another
    device run eager. What was swapped: ``policy.fused_ops_report`` (``strategies.fused``).

    ``lora``: null trains every parameter; a spec (``wmrl.weights.lora``: rank, alpha, dropout,
    target_modules, init, path) freezes the base and puts peft LoRA adapters on
    ``target_modules`` (default ``LORA_TARGETS``, RLinf's), or loads the adapter directory
    ``path`` on top of the base."""
    if pretrained_path:
        model = OpenVLAOFTPolicy.from_pretrained(
            str(pretrained_path), unnorm_key=unnorm_key, dtype=dtype,
            attn_implementation=attn_implementation, overrides=_plain(overrides),
            ignore_key_prefixes=tuple(ignore_key_prefixes))
    else:
        cfg = _plain(config) if config is not None else tiny_config()
        if overrides:
            cfg = dict(cfg, wmrl={**(cfg.get("wmrl") or {}), **_plain(overrides)})
        model = OpenVLAOFTPolicy.from_config(cfg, seed=seed, unnorm_key=unnorm_key,
                                             attn_implementation=attn_implementation)
        model = model.to(to_dtype(dtype, "policy.dtype"))
        model._mean, model._std = model._mean.float(), model._std.float()
    device_type = fused_ops_config(fused_ops)
    model.fused_ops_report = (apply_fused_ops(model, device_type, ops=("rms_norm", "rotary"))
                              if device_type else None)
    if lora:
        add_lora(model, _plain(lora), LORA_TARGETS)
    if gradient_checkpointing:
        model.set_gradient_checkpointing(True)
    return model


def build_policy_meta(pretrained_path: str | None = None, config: dict | None = None,
                      dtype: str = "float32",
                      attn_implementation: str = "sdpa",
                      overrides: dict | None = None, lora: dict | None = None,
                      **_) -> OpenVLAOFTPolicy:
    """``build_policy``'s arguments, built on the meta device: every parameter has its shape and
    dtype, no weight is read or allocated (memory planning, ``scripts/plan.py``).

    Architecture: the checkpoint's ``config.json`` when ``pretrained_path`` is a directory that
    holds one (continuous-action releases are refused, as by ``from_pretrained``); otherwise
    ``config``, or the published 7B architecture (``openvla_7b_config``) when only an absent
    checkpoint path was given, or the tiny config when neither was given (as ``build_policy``).
    """
    if is_policy_dir(pretrained_path):
        cfg = read_pretrained_config(str(pretrained_path), _plain(overrides))
    else:
        if config is not None:
            cfg = _plain(config)
        else:
            cfg = openvla_7b_config() if pretrained_path else tiny_config()
        if overrides:
            cfg = dict(cfg, wmrl={**(cfg.get("wmrl") or {}), **_plain(overrides)})
    with torch.device("meta"):
        model = OpenVLAOFTPolicy(cfg, tokenizer=None, attn_implementation=attn_implementation,
                                 check_stats=False).to(to_dtype(dtype, "policy.dtype"))
        if lora:  # the adapters' shapes from the spec (an adapter path is not read)
            add_lora(model, {k: v for k, v in _plain(lora).items() if k != "path"},
                     LORA_TARGETS)
    return model


def write_random_policy(path: str, config: dict | None = None, dtype: str = "bfloat16",
                        unnorm_key: str = "libero_spatial_no_noops", seed: int = 0,
                        max_shard_bytes: int = 2 << 30) -> int:
    """A checkpoint directory in the published layout with random weights
    (``wmrl.weights.random_weights``) at ``config``'s shapes (None: the published 7B), written a
    shard at a time; returns its tensor bytes. What ``scripts/full_size_check.py`` loads when
    ``policy.pretrained_path`` holds no checkpoint. Its tokenizer is the word-level one
    (``build_tiny_tokenizer``) at the config's vocabulary size, its dataset statistics
    ``unnorm_key``'s (the tiny config's bounds)."""
    cfg = copy.deepcopy(config) if config is not None else openvla_7b_config()
    with torch.device("meta"):
        model = OpenVLAOFTPolicy(cfg, tokenizer=None, check_stats=False)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    cfg["norm_stats"] = {**(cfg.get("norm_stats") or {}), unnorm_key: next(
        iter(tiny_config()["norm_stats"].values()))}
    vocab = int(cfg["text_config"]["vocab_size"]) - int(cfg["pad_to_multiple_of"])
    dtype = to_dtype(dtype, "policy.dtype")
    write_pretrained(path, cfg, random_tensors(shapes, dtype, seed),
                     build_tiny_tokenizer(vocab), max_shard_bytes)
    return sum(math.prod(s) for s in shapes.values()) * dtype.itemsize


def _plain(x):
    """OmegaConf containers -> plain python (picklable)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(x, (DictConfig, ListConfig)):
            return OmegaConf.to_container(x, resolve=True)
    except ImportError:
        pass
    return copy.deepcopy(x)
