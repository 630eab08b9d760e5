"""TOPReward: a frozen Qwen3-VL reads success off one token's probability (no generation).

For each env the VLM sees the last ``window`` frames (default 16: this chunk plus the
previous one) as one video, then the text::

    The above video shows a robot manipulation trajectory that completes the following
    task: {task} Decide whether the above statement is True or not. The answer is: True

and the score is ``logp = log softmax(logits[-2])[id(" True")]``: the logit at the position
before the final `` True`` token predicts it. As in the reference, success is
``P(" True") = exp(logp) >= threshold`` (default 0.46). The contract wants per-frame scores
in [0, 1]: with ``binary=True`` (default) every frame of the chunk gets that 0/1 label (one
judgement per chunk, so the env's "max over the chunk >= 0.9" marks success at the chunk's
end); with ``binary=False`` every frame gets ``exp(logp)``. ``last_logprob`` keeps the raw
``logp`` of the latest call, one per env.

Frame history: the reward keeps, per env id, the latest ``window`` frames across calls.
Row ``i`` of a call is env ``env_ids[i]`` (default ``i``; pass ``env_ids`` when scoring only
the still-running envs). The env must call ``reset(env_ids)`` for envs whose episode
restarts (``reset()`` clears all), so a window never spans two episodes; after a reset the
first window holds only the new chunk (8 frames), as in the reference.

Video preprocessing is done here in torch, reproducing ``Qwen3VLVideoProcessor`` (whose
torch path needs torchvision, unusable in this project) from the checkpoint's own
``video_preprocessor_config.json``: every frame is kept (no fps sub-sampling: the HF
default would keep only 4 of 16 frames for pre-sampled frames without metadata), frames
are resized with ``smart_resize`` only if needed (bicubic, antialiased), rescaled,
normalised and patchified; the prompt gets one ``<{t:.1f} seconds><|vision_start|>
<|video_pad|>*n<|vision_end|>`` group per temporal patch, with ``t`` from ``video_fps``.
All envs go through one left-padded forward (``max_batch`` splits it if memory is short).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from wmrl.rewards.base import LazyRewardModel
from wmrl.weights.dtypes import to_dtype

PROMPT = (
    "The above video shows a robot manipulation trajectory that completes the following "
    "task: {task} Decide whether the above statement is True or not. The answer is: True"
)
ANSWER = " True"


class VideoPrep:
    """The Qwen3-VL video processor's math for pre-sampled uint8 frames (no torchvision)."""

    def __init__(self, model_path: str | Path) -> None:
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import (
            Qwen3VLVideoProcessor,
        )

        vp = Qwen3VLVideoProcessor.from_pretrained(str(model_path))
        self.patch = int(vp.patch_size)
        self.temporal_patch = int(vp.temporal_patch_size)
        self.merge = int(vp.merge_size)
        self.min_pixels = int(vp.size.shortest_edge)
        self.max_pixels = int(vp.size.longest_edge)
        self.cap_pixels_per_frame = bool(vp.cap_pixels_per_frame)
        self.max_video_tokens = int(vp.max_video_tokens)
        self.rescale = float(vp.rescale_factor) if vp.do_rescale else 1.0
        self.mean = torch.tensor(vp.image_mean if vp.do_normalize else [0.0] * 3).view(1, 3, 1, 1)
        self.std = torch.tensor(vp.image_std if vp.do_normalize else [1.0] * 3).view(1, 3, 1, 1)

    def target_size(self, num_frames: int, height: int, width: int) -> tuple[int, int]:
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

        factor = self.patch * self.merge
        max_pixels = self.max_pixels
        if self.cap_pixels_per_frame:
            frame_cap = self.max_video_tokens * factor * factor
            per_frame = max(min(frame_cap, self.max_pixels // num_frames),
                            int(self.min_pixels * 1.05))
            max_pixels = per_frame * num_frames
        return smart_resize(num_frames, height, width, temporal_factor=self.temporal_patch,
                            factor=factor, min_pixels=self.min_pixels, max_pixels=max_pixels)

    def __call__(self, frames: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """uint8 [T, H, W, 3] -> (patches [grid_t*grid_h*grid_w, 3*tp*p*p], (t, h, w) grid)."""
        t = frames.shape[0]
        x = frames.permute(0, 3, 1, 2).float()
        h, w = self.target_size(t, x.shape[-2], x.shape[-1])
        if (h, w) != tuple(x.shape[-2:]):
            x = F.interpolate(x, size=(h, w), mode="bicubic", align_corners=False,
                              antialias=True).round_().clamp_(0, 255)
        x = (x * self.rescale - self.mean) / self.std
        if pad := -t % self.temporal_patch:  # repeat the last frame, as the processor does
            x = torch.cat([x, x[-1:].expand(pad, -1, -1, -1)])
        gt, gh, gw = x.shape[0] // self.temporal_patch, h // self.patch, w // self.patch
        m, p, tp = self.merge, self.patch, self.temporal_patch
        x = x.view(gt, tp, 3, gh // m, m, p, gw // m, m, p)
        x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
        return x.reshape(gt * gh * gw, 3 * tp * p * p), (gt, gh, gw)

    def timestamps(self, num_frames: int, fps: float) -> list[float]:
        """Mean time of the frames in each temporal patch (frames padded like the pixels)."""
        idx = list(range(num_frames))
        idx += [idx[-1]] * (-num_frames % self.temporal_patch)
        secs = [i / fps for i in idx]
        tp = self.temporal_patch
        return [(secs[i] + secs[i + tp - 1]) / 2 for i in range(0, len(secs), tp)]


class TOPReward(LazyRewardModel):
    """Frozen Qwen3-VL success judge; ``reward(frames [B, C, H, W, 3], tasks) -> [B, C]``."""

    stateful = True  # the frame history per env

    def __init__(self, model_path: str, window: int = 16,
                 threshold: float = 0.46, binary: bool = True,
                 video_fps: float = 20.0, device: str = "cpu",
                 dtype: str = "auto",
                 attn_implementation: str = "sdpa",
                 max_batch: int | None = None) -> None:
        super().__init__(device)
        if window < 1 or not 0.0 <= threshold <= 1.0 or video_fps <= 0:
            raise ValueError(f"reward config: need window >= 1, threshold in [0, 1], "
                             f"video_fps > 0; got {window}, {threshold}, {video_fps}")
        self.model_path = str(model_path)
        self.window = int(window)
        self.threshold = float(threshold)
        self.binary = bool(binary)
        self.video_fps = float(video_fps)
        self.dtype = dtype
        self.attn_implementation = attn_implementation
        self.max_batch = max_batch
        self.history: dict[int, torch.Tensor] = {}  # env id -> last `window` frames
        self.last_logprob: torch.Tensor | None = None
        self._tok = None
        self._prep: VideoPrep | None = None

    # -- loading -------------------------------------------------------------------------
    def _torch_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            return torch.bfloat16 if self.device.type != "cpu" else torch.float32
        return to_dtype(self.dtype, "reward.dtype")

    def resolved_path(self) -> Path:
        """``model_path``, or for ``"tiny"`` a seeded tiny model written once to the temp dir."""
        if self.model_path != "tiny":
            return Path(self.model_path)
        path = Path(tempfile.gettempdir()) / "wmrl_tiny_qwen3vl_seed0"
        if not (path / "model.safetensors").is_file():
            staging = Path(tempfile.mkdtemp(prefix=".wmrl_tiny_qwen3vl_", dir=path.parent))
            save_tiny_qwen3vl(staging, seed=0)
            try:
                os.replace(staging, path)  # atomic; a concurrent writer may have won
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
        return path

    def _load_text_side(self) -> None:
        from transformers import AutoTokenizer

        path = self.resolved_path()
        if not (path / "config.json").is_file() and not (path / "tokenizer.json").is_file():
            raise FileNotFoundError(f"reward.model_path {path}: not a local Qwen3-VL directory "
                                    "(config.json, tokenizer files, video_preprocessor_config)")
        tok = AutoTokenizer.from_pretrained(str(path))
        ids = tok.encode(ANSWER, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"reward.model_path {path}: the tokenizer splits {ANSWER!r} into "
                             f"{len(ids)} tokens {ids}; TOPReward reads one next-token "
                             "probability, so it needs a tokenizer where it is a single token")
        self.true_id = ids[0]
        self.video_token_id = tok.convert_tokens_to_ids("<|video_pad|>")
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self._tok = tok
        self._prep = VideoPrep(path)

    def _build(self) -> nn.Module:
        from transformers import Qwen3VLForConditionalGeneration

        if self._tok is None:
            self._load_text_side()
        return Qwen3VLForConditionalGeneration.from_pretrained(
            str(self.resolved_path()), dtype=self._torch_dtype(),
            attn_implementation=self.attn_implementation,
        )

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_tok"] = None  # rebuilt on the worker with the model
        state["_prep"] = None
        return state

    # -- history -------------------------------------------------------------------------
    def reset(self, env_ids: Sequence[int] | torch.Tensor | None = None) -> None:
        """Forget the frame history of ``env_ids`` (all envs when None): call on env reset."""
        if env_ids is None:
            self.history = {}
            return
        for i in torch.as_tensor(env_ids).flatten().tolist():
            self.history.pop(int(i), None)

    def _windows(self, frames: torch.Tensor, env_ids: list[int]) -> list[torch.Tensor]:
        windows = []
        for row, env in enumerate(env_ids):
            past = self.history.get(env)
            if past is not None and past.shape[1:] != frames.shape[2:]:
                raise ValueError(f"TOPReward: env {env} frames changed shape "
                                 f"{tuple(past.shape[1:])} -> {tuple(frames.shape[2:])}; "
                                 "call reward.reset() between runs")
            seq = frames[row] if past is None else torch.cat([past, frames[row]])
            self.history[env] = seq[-self.window:].clone()
            windows.append(self.history[env])
        return windows

    # -- inputs --------------------------------------------------------------------------
    def build_inputs(self, windows: Sequence[torch.Tensor], tasks: Sequence[str]) -> dict:
        """Left-padded batch for ``Qwen3VLForConditionalGeneration`` (ends with `` True``)."""
        if self._tok is None:
            self._load_text_side()
        seqs, pixels, grids = [], [], []
        merge2 = self._prep.merge ** 2
        for frames, task in zip(windows, tasks):
            patches, (gt, gh, gw) = self._prep(frames.cpu())
            per_frame = "<|video_pad|>" * (gh * gw // merge2)
            video = "".join(f"<{t:.1f} seconds><|vision_start|>{per_frame}<|vision_end|>"
                            for t in self._prep.timestamps(frames.shape[0], self.video_fps))
            ids = self._tok.encode(video + PROMPT.format(task=task), add_special_tokens=False)
            if ids[-1] != self.true_id:
                raise ValueError(f"TOPReward: prompt for task {task!r} does not end with the "
                                 f"single token {ANSWER!r}; check the tokenizer")
            seqs.append(ids)
            pixels.append(patches)
            grids.append((gt, gh, gw))
        n = max(len(s) for s in seqs)
        input_ids = torch.full((len(seqs), n), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(seqs), n), dtype=torch.long)
        for row, ids in enumerate(seqs):
            input_ids[row, n - len(ids):] = torch.tensor(ids)
            attention_mask[row, n - len(ids):] = 1
        mm_token_type_ids = (input_ids == self.video_token_id).long() * 2  # 2 = video
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "mm_token_type_ids": mm_token_type_ids,
            "pixel_values_videos": torch.cat(pixels),
            "video_grid_thw": torch.tensor(grids, dtype=torch.long),
        }

    @torch.no_grad()
    def logprob_true(self, windows: Sequence[torch.Tensor], tasks: Sequence[str]) -> torch.Tensor:
        """log P(" True" | video, prompt) per window: float [len(windows)]."""
        model = self.model
        out = []
        step = self.max_batch or len(windows)
        for i in range(0, len(windows), step):
            inputs = self.build_inputs(windows[i:i + step], tasks[i:i + step])
            inputs = {k: v.to(self.device) for k, v in inputs.items()}
            inputs["pixel_values_videos"] = inputs["pixel_values_videos"].to(model.dtype)
            logits = model(**inputs, use_cache=False, logits_to_keep=2).logits[:, 0].float()
            out.append(torch.log_softmax(logits, dim=-1)[:, self.true_id].cpu())
        return torch.cat(out)

    def __call__(self, frames: torch.Tensor, tasks: Sequence[str],
                 env_ids: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
        """Scores [B, C]; ``env_ids`` names the env slot of each row (default ``0..B-1``): pass
        it when scoring a subset of the envs, so each row extends its own history."""
        if frames.ndim != 5 or frames.dtype != torch.uint8 or frames.shape[-1] != 3:
            raise ValueError(f"reward frames: expected uint8 [B, C, H, W, 3], got {frames.dtype} "
                             f"{tuple(frames.shape)}")
        b, c = frames.shape[:2]
        if len(tasks) != b:
            raise ValueError(f"reward: got {len(tasks)} task strings for {b} envs")
        ids = list(range(b)) if env_ids is None else torch.as_tensor(env_ids).flatten().tolist()
        if len(ids) != b or len(set(ids)) != b:
            raise ValueError(f"reward: env_ids must name {b} distinct envs, got {ids}")
        logp = self.logprob_true(self._windows(frames.cpu(), ids), list(tasks))
        self.last_logprob = logp
        prob = logp.exp()
        score = (prob >= self.threshold).float() if self.binary else prob
        return score[:, None].expand(b, c).contiguous()


def save_tiny_qwen3vl(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a tiny random Qwen3-VL in the upstream layout (config.json + safetensors,
    tokenizer files, video/image processor configs) for tests and CPU runs. The byte-level
    BPE tokenizer is trained offline on the prompt, so `` True`` is one token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
               "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [PROMPT.format(task="put the bowl on the plate") + " False",
              "<0.1 seconds> 0123456789 pick up the black bowl and place it in the basket"]
    bpe.train_from_iterator(corpus * 4, trainers.BpeTrainer(
        vocab_size=400, special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>")
    tok.save_pretrained(out)
    ids = dict(zip(special, tok.convert_tokens_to_ids(special)))
    Qwen3VLVideoProcessor(size={"shortest_edge": 32 * 32 * 2, "longest_edge": 32 * 32 * 64},
                          cap_pixels_per_frame=False, image_mean=[0.5] * 3,
                          image_std=[0.5] * 3).save_pretrained(out)
    Qwen2VLImageProcessorPil(size={"shortest_edge": 32 * 32, "longest_edge": 32 * 32 * 64},
                             image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(out)
    config = Qwen3VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=8, pad_token_id=ids["<|endoftext|>"],
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                           patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                           out_hidden_size=32, num_position_embeddings=64,
                           deepstack_visual_indexes=[0]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        Qwen3VLForConditionalGeneration(config).save_pretrained(out)
    (out / "wmrl_tiny.json").write_text(json.dumps({"seed": seed}))
    return out
