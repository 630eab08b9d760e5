"""OpenVLA-OFT policy (Prismatic DINOv2+SigLIP -> MLP projector -> Llama-2) with parallel decoding.

One forward pass decodes the whole chunk: the sequence is
``[BOS, image patches (+ proprio token), prompt tokens, 56 zero-embedded action placeholders
(, stop token)]`` under *bidirectional* attention (padding-only mask). The logits that predict
action k are read at the position before it (the last prompt token for k = 0), restricted to the
256 action ids, as in openvla-oft's ``predict_action`` and RLinf's ``default_forward``.

Checkpoint layout = the published HF OpenVLA-OFT one: ``config.json`` (OpenVLAConfig fields),
``model-0000i-of-0000n.safetensors`` + ``model.safetensors.index.json`` with keys
``vision_backbone.featurizer.*`` (DINOv2), ``vision_backbone.fused_featurizer.*`` (SigLIP),
``projector.fc{1,2,3}.*``, ``language_model.{model.*,lm_head.weight}``, plus
``dataset_statistics.json`` and the tokenizer files. wmrl-only settings live under the
``"wmrl"`` key of config.json (absent in upstream files -> LIBERO defaults).
"""

from __future__ import annotations

import copy
import glob
import json
import math
import os
import re
import shutil
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from strategies.fused import apply_fused_ops, fused_ops_config
from wmrl.interfaces import PolicySample
from wmrl.policies import action_tokenizer as at
from wmrl.policies.text_tokenizer import PromptEncoder, build_tiny_tokenizer, load_tokenizer
from wmrl.policies.vit import Block, VisionTransformer, ViTConfig, vit_config_for
from wmrl.safetensors_shards import INDEX_NAME, write_sharded
from wmrl.schema import DTYPES, PolicyAttention, PolicySchema, defaults

# backends that honour a 4-D additive mask (no causal mask): the schema's choices
SUPPORTED_ATTN = tuple(a.name for a in PolicyAttention)
# build_policy's defaults are the typed schema's (wmrl/schema.py): one source
_SETTINGS = defaults(PolicySchema)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIGLIP_MEAN, SIGLIP_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)

# wmrl settings (config["wmrl"]); defaults = the LIBERO OFT / WoVR recipe.
WMRL_DEFAULTS = dict(
    chunk=8,
    action_dim=7,
    num_images_in_input=1,  # 2 = third-person + wrist image (obs["wrist_image"])
    proprio_dim=0,  # > 0 adds OFT's proprio token from obs["state"] (keys proprio_projector.*)
    empty_token_id=29871,  # Llama '▁' that follows "Out:" in training data
    stop_token_id=2,
    append_stop_token=False,  # RLinf drops it; openvla-oft's predict_action keeps it
    gripper="libero",  # binarise + invert: -sign(2g - 1)
    top_k=0,
    center_crop=False,  # crop 90% area then resize back (openvla-oft's eval option; RLinf's
    #                     LIBERO rollout does not crop)
    image_means=[list(IMAGENET_MEAN), list(SIGLIP_MEAN)],
    image_stds=[list(IMAGENET_STD), list(SIGLIP_STD)],
    vision_configs=None,  # explicit ViTConfig dicts (tiny models); None = from timm_model_ids
)


def _prismatic_config(image_size: int, vocab_base: int, **llama) -> dict:
    """The fields of an OpenVLA ``config.json`` that set shapes: fused DINOv2 + SigLIP at
    ``image_size``, Llama with the vocabulary padded by 64 above ``vocab_base``."""
    return dict(
        model_type="openvla",
        vision_backbone_id="dinosiglip-vit-so-224px",
        llm_backbone_id="llama2-7b-pure",
        use_fused_vision_backbone=True,
        timm_model_ids=["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
        image_sizes=[image_size, image_size],
        image_resize_strategy="resize-naive",
        pad_token_id=vocab_base,
        pad_to_multiple_of=64,
        n_action_bins=256,
        text_config=dict(model_type="llama", vocab_size=vocab_base + 64, rms_norm_eps=1e-6,
                         pad_token_id=vocab_base, **llama),
        norm_stats={},
    )


def tiny_config(image_size: int = 32, vocab_base: int = 512) -> dict:
    """A tiny fused DINOv2+SigLIP / Llama config with real structure (CPU tests, benches)."""
    dino = ViTConfig(img_size=image_size, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     init_values=1e-5, reg_tokens=4, no_embed_class=True)
    siglip = ViTConfig(img_size=image_size, patch_size=8, embed_dim=48, depth=2, num_heads=2,
                       mlp_ratio=3.7362, class_token=False, global_pool="map")
    cfg = _prismatic_config(image_size, vocab_base, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                            max_position_embeddings=512)
    cfg["norm_stats"] = {"libero_spatial_no_noops": {"action": {
        "q01": [-0.75, -0.75, -0.9, -0.1, -0.15, -0.2, 0.0],
        "q99": [0.9, 0.85, 0.95, 0.15, 0.2, 0.3, 1.0],
        "mask": [True] * 6 + [False],
    }}}
    cfg["wmrl"] = dict(WMRL_DEFAULTS, empty_token_id=3,
                       vision_configs=[dino.to_dict(), siglip.to_dict()])
    return cfg


def openvla_7b_config() -> dict:
    """The architecture of the published OpenVLA-7B / OpenVLA-OFT checkpoints (fused DINOv2
    ViT-L/14-reg4 + SigLIP so400m/14 at 224 px, fused-GELU MLP projector, Llama-2-7B with the
    vocabulary padded from 32000 to 32064). No ``norm_stats``: it describes shapes only
    (``build_policy_meta`` builds it on the meta device when no checkpoint directory is at
    hand, e.g. ``scripts/plan.py``)."""
    return _prismatic_config(224, 32000, hidden_size=4096, intermediate_size=11008,
                             num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                             max_position_embeddings=2048)


# openvla-oft saves its continuous heads beside the backbone as "<module>--<step>_checkpoint.pt"
# (e.g. action_head--150000_checkpoint.pt); its loader finds them by name the same way.
_SIDE_HEAD_RE = re.compile(
    r"^(action_head|proprio_projector|noisy_action_projector)--.*checkpoint.*\.pt$")


def check_token_checkpoint(path: str) -> None:
    """Refuse openvla-oft's L1-regression (and diffusion) releases.

    Those keep a separate continuous action head (and proprio projector) beside the backbone; the
    backbone's keys load into this token model, but its actions would come from the language
    model's (untrained) action-token logits, not from the head the checkpoint was trained with.
    """
    found = sorted(f for f in os.listdir(path) if _SIDE_HEAD_RE.match(f))
    if found:
        raise ValueError(
            f"{path} is an openvla-oft continuous-action release (L1 regression or diffusion): "
            f"it keeps {', '.join(found)} beside the backbone. wmrl's OpenVLA-OFT policy "
            "decodes discrete action tokens from the language model head, so this checkpoint "
            "would load by key but not reproduce its actions (the separate action head and "
            "proprio projector would be ignored). Use a discrete action-token OpenVLA-OFT "
            "checkpoint instead: RLinf's OpenVLA-OFT LIBERO SFT/RL releases (e.g. "
            "Haozhan72/Openvla-oft-SFT-libero-spatial-traj1 or the RL-trained RLinf "
            "OpenVLA-OFT LIBERO checkpoints). If this directory's backbone really is a token "
            "model, move those files out of it.")


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


def _resolve(config: dict) -> tuple[dict, dict]:
    config = copy.deepcopy(dict(config))
    for key in ("text_config", "n_action_bins", "pad_to_multiple_of"):
        if key not in config:
            raise KeyError(f"policy config is missing {key!r} (OpenVLAConfig field)")
    wm = dict(WMRL_DEFAULTS)
    wm.update(config.get("wmrl") or {})
    config["wmrl"] = wm
    return config, wm


class OpenVLAOFTPolicy(nn.Module):
    """``Policy`` (wmrl.interfaces): ``sample`` / ``log_probs`` over 8x7 action-bin tokens."""

    def __init__(self, config: dict, tokenizer=None, unnorm_key: str | None = None,
                 attn_implementation: str = _SETTINGS["attn_implementation"],
                 check_stats: bool = True):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        self.config, wm = _resolve(config)
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
                        dtype: torch.dtype | str = _SETTINGS["dtype"],
                        attn_implementation: str = _SETTINGS["attn_implementation"],
                        overrides: dict | None = None,
                        ignore_key_prefixes: tuple[str, ...] = ()) -> OpenVLAOFTPolicy:
        """Load the published OpenVLA-OFT / RLinf layout from a local directory."""
        config = read_pretrained_config(path, overrides)
        dtype = _as_dtype(dtype)
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
        """Write the upstream layout atomically (built in a temp dir, then renamed)."""
        path = os.path.abspath(path)
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
        try:
            cfg = copy.deepcopy(self.config)
            cfg["model_type"] = "openvla"
            cfg["architectures"] = ["OpenVLAForActionPrediction"]
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(cfg, f, indent=2)
            with open(os.path.join(tmp, "dataset_statistics.json"), "w") as f:
                json.dump(cfg.get("norm_stats") or {}, f, indent=2)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(tmp)
            # own CPU copies: safetensors refuses tensors that share storage
            write_sharded(tmp, ((k, v.detach().to("cpu").contiguous().clone())
                                for k, v in self.state_dict().items()), max_shard_bytes)
            old = None
            if os.path.exists(path):
                old = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.old-", dir=parent)
                os.replace(path, os.path.join(old, "x"))
            os.replace(tmp, path)
            if old:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if os.path.exists(tmp):
                shutil.rmtree(tmp, ignore_errors=True)

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
        logits = F.linear(h, self.language_model.lm_head.weight[first: self.vocab_base])
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


def read_pretrained_config(path: str, overrides: dict | None = None) -> dict:
    """The policy config of a local checkpoint directory: ``config.json`` with the entries of
    ``dataset_statistics.json`` (they win) and ``preprocessor_config.json`` pixel statistics,
    plus ``overrides`` of the wmrl settings. Refuses openvla-oft's continuous-action releases
    (``check_token_checkpoint``)."""
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise FileNotFoundError(f"{cfg_path} not found: pretrained_path must be a local "
                                "OpenVLA-OFT checkpoint directory")
    check_token_checkpoint(path)
    with open(cfg_path) as f:
        config = json.load(f)
    if config.get("model_type") not in ("openvla", "prismatic", None):
        raise ValueError(f"{cfg_path}: model_type {config.get('model_type')!r} is not openvla")
    stats_path = os.path.join(path, "dataset_statistics.json")
    if os.path.isfile(stats_path):  # RLinf/OFT: the file's entries override config norm_stats
        with open(stats_path) as f:
            config["norm_stats"] = {**(config.get("norm_stats") or {}), **json.load(f)}
    pre_path = os.path.join(path, "preprocessor_config.json")
    wm = dict(config.get("wmrl") or {})
    if os.path.isfile(pre_path) and "image_means" not in wm:
        with open(pre_path) as f:
            pre = json.load(f)
        if "means" in pre and "stds" in pre:
            wm["image_means"], wm["image_stds"] = pre["means"], pre["stds"]
    wm.update(overrides or {})
    config["wmrl"] = wm
    return config


def resize_like_rlinf(x: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 values as float [B, 3, H, W] -> [B, 3, size, size], rounded back to uint8 values.

    As RLinf's Prismatic processor (torchvision ``resize`` of the uint8 tensor, bicubic,
    antialiased): interpolate in float32, round half to even, clamp to [0, 255]; the caller then
    divides by 255 and normalises. Same size: returned unchanged."""
    if x.shape[-2:] == (size, size):
        return x
    y = F.interpolate(x, size=(size, size), mode="bicubic", antialias=True, align_corners=False)
    return y.round().clamp(0, 255)


def _as_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} unknown; use one of {sorted(DTYPES)}")
    return getattr(torch, DTYPES[dtype])


LOAD_PROGRESS_BYTES = 1 << 30  # checkpoints from 1 GiB load with a progress bar


def load_safetensors_dir(model: nn.Module, directory: str,
                         ignore_key_prefixes: tuple[str, ...] = ()) -> None:
    """Strict load: a missing / unexpected key or a wrong shape is an error naming the key."""
    from safetensors import safe_open

    index = os.path.join(directory, INDEX_NAME)
    if os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
    else:
        files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
        if not files:
            raise FileNotFoundError(f"no {INDEX_NAME} or *.safetensors in {directory}")
        weight_map = {}
        for fn in files:
            with safe_open(fn, framework="pt") as f:
                weight_map.update({k: os.path.basename(fn) for k in f.keys()})
    weight_map = {k: v for k, v in weight_map.items()
                  if not any(k.startswith(p) for p in ignore_key_prefixes)}
    params = model.state_dict(keep_vars=True)
    missing = sorted(set(params) - set(weight_map))
    unexpected = sorted(set(weight_map) - set(params))
    if missing or unexpected:
        raise KeyError(f"checkpoint {directory} does not match the model: missing keys "
                       f"{missing[:10]}{' ...' if len(missing) > 10 else ''}, unexpected keys "
                       f"{unexpected[:10]}{' ...' if len(unexpected) > 10 else ''}")
    by_file: dict[str, list[str]] = {}
    for k, fn in weight_map.items():
        by_file.setdefault(fn, []).append(k)
    size = sum(params[k].numel() * params[k].element_size() for k in weight_map)
    # a bar for a real checkpoint (a 7B policy loads for minutes), none for the tiny ones
    bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"[load] {directory}",
               mininterval=2.0, leave=False, disable=size < LOAD_PROGRESS_BYTES)
    with torch.no_grad(), bar:
        for fn, keys in by_file.items():
            with safe_open(os.path.join(directory, fn), framework="pt") as f:
                for k in keys:
                    shape = tuple(f.get_slice(k).get_shape())
                    if shape != tuple(params[k].shape):
                        raise ValueError(f"checkpoint key {k!r} has shape {shape}, the model "
                                         f"expects {tuple(params[k].shape)}")
                    params[k].copy_(f.get_tensor(k))
                    bar.update(params[k].numel() * params[k].element_size())


def build_policy(pretrained_path: str | None = None, config: dict | None = None,
                 unnorm_key: str | None = _SETTINGS["unnorm_key"],
                 dtype: str = _SETTINGS["dtype"],
                 gradient_checkpointing: bool = _SETTINGS["gradient_checkpointing"],
                 attn_implementation: str = _SETTINGS["attn_implementation"],
                 overrides: dict | None = None, seed: int = _SETTINGS["seed"],
                 ignore_key_prefixes: list[str] | tuple[str, ...] = (),
                 fused_ops: bool | str | None = _SETTINGS["fused_ops"]) -> OpenVLAOFTPolicy:
    """Hydra ``_target_``: load ``pretrained_path`` if given, else random weights from ``config``
    (a plain dict, picklable for Ray workers; None = the tiny config). ``overrides`` update the
    ``wmrl`` settings; ``ignore_key_prefixes`` skips checkpoint keys the policy does not use
    (e.g. ``["value_head."]`` of an RLinf PPO actor).

    ``fused_ops``: false (default) keeps the eager Llama; ``auto`` (or true) swaps its RMSNorms
    and rotary embedding for the fused kernels of this process's device family (npu:
    ``torch_npu.npu_rms_norm`` / ``npu_rotary_mul``; cuda, cpu: ``F.rms_norm``, eager rotary);
    a device type (``npu``, ``cuda``, ``cpu``) picks that family's kernels. Tensors on another
    device run eager. What was swapped: ``policy.fused_ops_report`` (``strategies.fused``)."""
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
        model = model.to(_as_dtype(dtype))
        model._mean, model._std = model._mean.float(), model._std.float()
    device_type = fused_ops_config(fused_ops)
    model.fused_ops_report = (apply_fused_ops(model, device_type, ops=("rms_norm", "rotary"))
                              if device_type else None)
    if gradient_checkpointing:
        model.set_gradient_checkpointing(True)
    return model


def build_policy_meta(pretrained_path: str | None = None, config: dict | None = None,
                      dtype: str = _SETTINGS["dtype"],
                      attn_implementation: str = _SETTINGS["attn_implementation"],
                      overrides: dict | None = None, **_) -> OpenVLAOFTPolicy:
    """``build_policy``'s arguments, built on the meta device: every parameter has its shape and
    dtype, no weight is read or allocated (memory planning, ``scripts/plan.py``).

    Architecture: the checkpoint's ``config.json`` when ``pretrained_path`` is a directory that
    holds one (continuous-action releases are refused, as by ``from_pretrained``); otherwise
    ``config``, or the published 7B architecture (``openvla_7b_config``) when only an absent
    checkpoint path was given, or the tiny config when neither was given (as ``build_policy``).
    """
    if pretrained_path and os.path.isfile(os.path.join(str(pretrained_path), "config.json")):
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
                                 check_stats=False)
    return model.to(_as_dtype(dtype))


def _plain(x):
    """OmegaConf containers -> plain python (picklable)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(x, (DictConfig, ListConfig)):
            return OmegaConf.to_container(x, resolve=True)
    except ImportError:
        pass
    return copy.deepcopy(x)
