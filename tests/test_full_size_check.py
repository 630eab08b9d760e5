"""scripts/full_size_check.py (``make full-size-check``; the logic: ``wmrl.full_size_check``)
at a tiny size: the same script, every part through its real code path (a synthetic release
imported by the real importer, an env actor's chunk step, a policy actor's sample, GRPO updates
with LoRA and with every parameter), each beside the plan's figure; nothing generated is left
behind. The figures mean something
only at full size (docs/experiments/2026-12-07-full-size-check.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wmrl.full_size_check.check import (
    new_output,
    new_specs_dir,
    remove_written,
    vae_in_float32,
)
from wmrl.full_size_check.check import run_check as main

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "full_size_check.py"
WM = "env.world_model."
TINY = ["policy.pretrained_path=null", f"{WM}height=64", f"{WM}width=64",
        f"{WM}transformer.num_attention_heads=2", f"{WM}transformer.attention_head_dim=16",
        f"{WM}transformer.ffn_dim=48", f"{WM}transformer.num_layers=1",
        f"{WM}transformer.freq_dim=16", f"{WM}transformer.text_dim=32", f"{WM}vae.base_dim=4",
        f"{WM}vae.decoder_base_dim=4", "reward.config.widths=[8,16,32,64]"]


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


@pytest.mark.slow
def test_every_part_runs_beside_the_plan_and_leaves_nothing(tmp_path):
    work = tmp_path / "check"
    work.mkdir()
    (work / "notes.txt").write_text("the user's")
    out = run(*TINY, f"+check.workdir={work}")  # every part, the GRPO ones too on a CPU
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r["name"]: r for r in map(json.loads, out.stdout.splitlines())}
    setup = rows["full_size_check.setup"]
    assert (setup["world_model"], setup["release"]) == ("imported", "synthetic")
    assert setup["reward"] == "random, at the config's widths"  # the release's file is absent
    assert setup["bf16_linears"].startswith("float32 GEMMs")  # cpu_linear on a CPU
    assert not any(name.endswith(".skipped") for name in rows)
    # the synthetic DiT at width 32 (2 heads of 16), ffn 48, 48 channels, freq 16, 1 block:
    # outside the blocks 29,664 (patch 6,176, time 544 + 1,056 + 6,336, head 6,336 + 64,
    # action 256 + 1,056 + 3,712 + 4,128), one block 11,984 (2 attentions of 4 x 1,056 + 2 x
    # 32 norms, norm3 64, ffn 1,584 + 1,568, modulation 192)
    assert rows["full_size_check.release.write_s"]["dit_params"] == 29_664 + 11_984
    full = rows["full_size_check.policy_checkpoint.write_s"]["params"]
    for part in ("world_model", "rollout", "grpo_lora", "grpo_full"):
        peak = rows[f"full_size_check.{part}.peak_gb"]
        assert peak["value"] > 0 and peak["plan_gb"] > 0 and peak["device"] == "cpu"
        assert peak["plan_gb"] == pytest.approx(
            peak["plan_resident_gb"] + peak["plan_working_gb"], abs=2e-3)
    assert rows["full_size_check.world_model.peak_gb"]["rewards_finite"]
    for part in ("world_model", "rollout", "grpo_lora", "grpo_full"):  # bf16 on a CPU:
        assert rows[f"full_size_check.{part}.peak_gb"]["float32_gemm_linears"] > 0
    assert rows["full_size_check.world_model.chunk_step_s"]["value"] > 0
    assert rows["full_size_check.rollout.peak_gb"]["actions"] == [1, 8, 7]
    lora, every = (rows[f"full_size_check.{p}.peak_gb"] for p in ("grpo_lora", "grpo_full"))
    # rank-32 adapters on a 64-wide model: fewer than its weights, but not by much
    assert every["trained_params"] == full and 0 < lora["trained_params"] < full
    assert lora["optimizer_steps"] == every["optimizer_steps"] == 1.0
    # release, import, policy, specs: removed; the user's file left
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt"]


def test_bad_options_are_refused_before_anything_runs(tmp_path, capsys):
    assert main([*TINY, "+check.parts=[world_model,sim]"]) == 2
    assert "+check.parts: ['sim'] unknown" in capsys.readouterr().err
    assert main([*TINY, "+check.nope=1"]) == 2
    assert "+check.nope: unknown; the options are ['device', 'envs'," in capsys.readouterr().err
    assert main([*TINY, f"+check.release={tmp_path}", f"+check.workdir={tmp_path / 'w'}"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and not (tmp_path / "w").exists()
    assert "has no model-*.safetensors, Wan2.2_VAE.pth, dataset/" in out.err


def test_the_cleanup_removes_only_what_the_run_wrote(tmp_path):
    """A user's files in +check.workdir survive the cleanup, even named as the check's specs
    (base.yaml, import.json) or as one of its outputs that was there before (policy/)."""
    for name in ("notes.txt", "base.yaml", "import.json"):
        (tmp_path / name).write_text("the user's")
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "weights.bin").write_text("the user's")
    made = []
    specs = new_specs_dir(tmp_path, made)
    (specs / "base.yaml").write_text("the check's")
    (specs / "import.json").write_text("{}")
    assert new_output(tmp_path / "policy", made) == tmp_path / "policy"  # there before
    (new_output(tmp_path / "world_model", made) / "transformer").mkdir(parents=True)
    assert made == [specs, tmp_path / "world_model"]
    remove_written(made)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "base.yaml", "import.json", "notes.txt", "policy"]
    assert (tmp_path / "base.yaml").read_text() == "the user's"
    assert (tmp_path / "policy" / "weights.bin").is_file()


def test_a_bf16_vae_runs_in_float32_on_a_cpu_however_spelled():
    assert vae_in_float32("cpu", "bf16") and vae_in_float32("cpu", "bfloat16")
    assert not vae_in_float32("cpu", "float32") and not vae_in_float32("cpu", None)
    assert not vae_in_float32("cuda:0", "bf16")
    with pytest.raises(ValueError, match="env.world_model.vae_dtype='bf8' is not allowed"):
        vae_in_float32("cpu", "bf8")
