"""``wmrl/plan/finetune.py``: the world-model fine-tune's bytes per rank, full and LoRA, with
numbers checked by hand."""

import copy
import json

import torch
from real_size_plans import default_finetune_plan
from tiny_models import tiny_world_model_config

from wmrl.plan.activations import trace_world_model_training
from wmrl.plan.finetune import finetune_model
from wmrl.plan.memory import GB
from wmrl.plan.report import finetune_json_lines, format_finetune_table
from wmrl.world_model.objective import FlowMatchObjective

# Wan2.2-TI2V-5B: 30 blocks, width 3072, FFN 14336; action modules at width 3072, 7-D actions,
# 4 actions per latent (action_mlp1 7 -> 3072 -> 3072, action_mlp2 28 -> 12288 -> 3072)
DIT = 4_999_787_712
ACTION = (7 * 3072 + 3072 + 3072 * 3072 + 3072) + (28 * 12288 + 12288 + 12288 * 3072 + 3072)
VAE = 704_688_668


def test_trainable_counts_by_hand():
    """Full: the DiT and the action modules. LoRA rank 32 on the fork's targets: per block
    8 square 3072 projections (to_q, to_k, to_v, to_out.0 of both attentions) and the FFN's
    3072 -> 14336 -> 3072, each r (in + out), plus the action modules in full."""
    ft = default_finetune_plan()
    full, lora = ft.params["full"], ft.params["lora"]
    assert ACTION == 47_572_992
    assert full["trainable"] == full["sharded"] == DIT + ACTION
    r = 32
    per_block = 8 * r * (3072 + 3072) + 2 * r * (3072 + 14336)
    assert per_block == 2_686_976 == lora["unit_trainable"]
    assert lora["trainable"] == 30 * per_block + ACTION == 128_182_272
    assert lora["params"] == full["params"] + 30 * per_block  # the adapters come on top
    assert full["units"] == lora["units"] == 30


def test_bytes_per_rank_by_hand():
    """bf16 weights over 8 ranks; replicated: the VAE, the 512 x 4096 text context, the 2 x 48
    latent statistics and the DiT's RoPE tables (2 x 1024 x 128), all bf16 under bf16-true;
    AdamW m + v in the param dtype (no master), or float32 with a float32 master copy."""
    ft = default_finetune_plan()
    n, pt = 8, DIT + ACTION
    assert ft.header["shard_group"] == n and ft.header["clips"] == 1
    assert ft.header["adamw_state_dtype"].startswith("param dtype")
    role = ft.roles[("full", False, "param dtype")]
    assert role.resident["weights_sharded"] == 2 * pt // n == 1_261_840_176
    replicated = 2 * (VAE + 512 * 4096 + 2 * 48 + 2 * 1024 * 128)
    assert role.resident["replicated (VAE, context, statistics)"] == replicated
    assert role.resident["adamw_m_v (param dtype)"] == 4 * pt // n
    assert role.resident["master_weights_fp32"] == 0 and role.working["grads"] == 2 * pt // n
    fp32 = ft.roles[("full", False, "fp32")]
    assert fp32.resident["adamw_m_v (fp32)"] == 8 * pt // n
    assert fp32.resident["master_weights_fp32"] == 4 * pt // n
    lora = ft.roles[("lora", False, "param dtype")]
    assert lora.resident["adamw_m_v (param dtype)"] == 4 * (30 * 2_686_976 + ACTION) // n
    # checkpointing keeps each block's input only: far less than every activation
    acts = ft.activations
    assert acts[("full", True)]["saved"] * 10 < acts[("full", False)]["saved"]
    for key, fits in ft.fits.items():  # the 5B fine-tune fits 40 GB cards either way
        assert ft.roles[key].peak < 0.9 * 40 * GB and all(fits.values())


def test_lora_marking_is_the_modules():
    """The plan marks trainable parameters as ``WorldModelFinetune._build`` does."""
    from wmrl.finetune.world_model_module import WorldModelFinetune

    cfg = tiny_world_model_config()
    for lora in (None, {"rank": 4}):
        module = WorldModelFinetune(world_model=cfg, lora=lora)
        real = module._build()
        meta = finetune_model(cfg, lora and lora["rank"])
        count = [sum(p.numel() for p in m.parameters() if p.requires_grad) for m in (real, meta)]
        assert count[0] == count[1]
        assert {p.dtype for p in meta.parameters()} == {torch.bfloat16}
    # 10 targeted 16 -> 16 Linear layers in the 1 block, r (in + out) each, + action modules
    action = sum(p.numel() for p in real.action.parameters())
    assert count[0] == 10 * 4 * (16 + 16) + action


def test_trace_keeps_what_autograd_saves():
    """The meta trace's live bytes after the forward are the storages autograd saves on CPU
    (CPU's fused SDPA saves q, k, v, the output and the logsumexp, as the efficient kernel the
    trace runs does; the two logsumexps differ by a few bytes), plus the step's own inputs."""
    cfg = tiny_world_model_config()
    model = finetune_model(cfg, None)
    b, h, w = 2, 32, 32
    cpu = copy.deepcopy(model).to_empty(device="cpu")
    torch.manual_seed(0)
    for t in [*cpu.parameters(), *cpu.buffers()]:
        t.data.normal_(0, 0.02)
    cpu.latents_std.fill_(1.0)
    trace = trace_world_model_training(model, b, h, w, 13, 5)
    latents = torch.zeros(b, 16, 4, h // 8, w // 8)
    skip = {t.untyped_storage().data_ptr() for t in [*cpu.parameters(), *cpu.buffers()]}
    saved = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in skip:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        FlowMatchObjective.wovr().loss(cpu, latents, torch.zeros(b, 13, 7), 2,
                                       noise=torch.zeros_like(latents),
                                       timestep_ids=torch.zeros(b, dtype=torch.long))
    inputs = 2 * latents.nbytes + b * 13 * 7 * 4 + 8  # latents, noise, actions, the loss
    assert sum(saved.values()) > 0
    assert sum(saved.values()) - 64 <= trace["saved"] <= sum(saved.values()) + inputs
    assert trace["working"] == max(trace["encode"], trace["forward"], trace["backward"])


def test_finetune_table_and_json_lines():
    ft = default_finetune_plan()
    table = format_finetune_table(ft)
    for text in ("world-model fine-tune", "LoRA rank 32", "128,182,272", "fp32 m+v+master",
                 "AdamW m + v in the param dtype"):
        assert text in table
    lines = [json.loads(x) for x in finetune_json_lines(ft)]
    peaks = [x for x in lines if x["figure"] == "finetune_peak"]
    assert len(peaks) == 8  # full / LoRA x checkpointing off / on x state dtype
    assert {x["adamw_states"] for x in peaks} == {"param dtype", "fp32"}
    assert lines[-1]["figure"] == "finetune_setup" and lines[-1]["master_weights"] == "none"
