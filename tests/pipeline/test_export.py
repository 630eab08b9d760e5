"""wmrl/pipeline/export.py (scripts/export.py): a fit checkpoint's policy written into its
source's layout (shards, names, shapes, dtypes, index, files), loaded back by wmrl and by
key set; the PACE-refined world model as a loadable directory; bad input in one line.
(The tabletop fit test, tests/test_resume.py, exports the checkpoint a real fit wrote.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from safetensors import safe_open
from tiny_models import tiny_world_model

from wmrl.config import CONFIG_KEY
from wmrl.errors import ConfigError
from wmrl.pace.round import trained_state
from wmrl.pipeline.export import export_policy, export_world_model
from wmrl.policies.configs import tiny_config
from wmrl.policies.openvla_oft import OpenVLAOFTPolicy, build_policy
from wmrl.world_model.action_wan import ActionWanModel

STATS = {"action": {"q01": [-0.5] * 6 + [0.0], "q99": [0.5] * 6 + [1.0],
                    "mask": [True] * 6 + [False]}}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A bf16 policy directory in the upstream layout, split into 2 shards."""
    root = tmp_path_factory.mktemp("export") / "base"
    cfg = dict(tiny_config(), norm_stats={"tabletop": STATS})
    policy = build_policy(config=cfg, unnorm_key="tabletop", dtype="bfloat16")
    policy.save_pretrained(str(root), max_shard_bytes=200_000)
    (root / "processor_config.json").write_text('{"any": "file"}')  # copied as it is
    return root


def fit_checkpoint(path, source, **extra) -> dict:
    """A checkpoint as scripts/fit.py writes it: the module's state_dict (the policy trained in
    float32) and the resolved run config."""
    policy = OpenVLAOFTPolicy.from_pretrained(str(source), unnorm_key="tabletop").float()
    trained = {f"policy.{k}": v + 0.01 * torch.randn_like(v) if v.is_floating_point() else v
               for k, v in policy.state_dict().items()}
    cfg = {"seed": 0, "task": {"name": "red_of_two"},
           "policy": {"_target_": "wmrl.policies.openvla_oft.build_policy",
                      "pretrained_path": str(source), "unnorm_key": "tabletop"},
           "algorithm": {"lr": 6e-5, "kl_coef": 0.1}}
    ckpt = {"state_dict": trained, "global_step": 30, CONFIG_KEY: cfg, **extra}
    torch.save(ckpt, path)
    return ckpt


def test_policy_goes_out_in_the_source_layout(source, tmp_path):
    ckpt = fit_checkpoint(tmp_path / "last.ckpt", source)
    out = tmp_path / "out"
    summary = export_policy(str(tmp_path / "last.ckpt"), str(out))
    assert len(summary["files"]) >= 2  # the source's two shards, same names
    src_files = sorted(p.name for p in source.iterdir())
    assert sorted(p.name for p in out.iterdir()) == sorted(src_files + ["README.md"])
    assert (out / "model.safetensors.index.json").read_text() == (
        source / "model.safetensors.index.json").read_text()
    for fn in summary["files"]:
        with safe_open(str(source / fn), "pt") as a, safe_open(str(out / fn), "pt") as b:
            assert sorted(a.keys()) == sorted(b.keys()) and a.metadata() == b.metadata()
            for k in a.keys():
                ta, tb = a.get_tensor(k), b.get_tensor(k)
                assert (tb.dtype, tb.shape) == (ta.dtype, ta.shape)  # bf16 kept
                assert torch.equal(tb, ckpt["state_dict"][f"policy.{k}"].to(ta.dtype))
    # wmrl loads it (strict: no missing or extra key) with the trained weights
    back = OpenVLAOFTPolicy.from_pretrained(str(out), unnorm_key="tabletop")
    assert torch.equal(back.state_dict()["projector.fc1.weight"],
                       ckpt["state_dict"]["policy.projector.fc1.weight"].bfloat16())
    card = (out / "README.md").read_text()
    assert "library_name: wmrl" in card and f"`{source}`" in card and "kl_coef: 0.1" in card


def test_a_lora_fit_goes_out_merged_or_as_its_adapter(source, tmp_path):
    """A LoRA fit's checkpoint (adapters only, ``lora_config``): merged into the source's
    layout (W + s B A, bf16 kept), or with ``adapter`` as a peft directory that
    ``PeftModel.from_pretrained`` loads onto the source and that scores as the merged one."""
    from peft import PeftModel

    from wmrl.weights.lora import config_json, merged_state_dict

    spec = {"rank": 4, "alpha": 8, "init": False}
    policy = build_policy(pretrained_path=str(source), unnorm_key="tabletop", lora=spec,
                          dtype="bfloat16")  # as the fit ran
    adapters = {f"policy.{k}": v for k, v in policy.state_dict().items() if ".lora_" in k}
    cfg = {"policy": {"_target_": "wmrl.policies.openvla_oft.build_policy",
                      "pretrained_path": str(source), "unnorm_key": "tabletop",
                      "dtype": "bfloat16", "lora": spec}}
    torch.save({"state_dict": adapters, "global_step": 3, CONFIG_KEY: cfg,
                "lora_config": config_json(policy)}, tmp_path / "lora.ckpt")
    export_policy(str(tmp_path / "lora.ckpt"), str(tmp_path / "merged"))
    back = OpenVLAOFTPolicy.from_pretrained(str(tmp_path / "merged"), unnorm_key="tabletop")
    want = merged_state_dict(policy)
    assert back.state_dict().keys() == want.keys()
    assert all(torch.equal(v, want[k].float()) for k, v in back.state_dict().items())
    base = OpenVLAOFTPolicy.from_pretrained(str(source), unnorm_key="tabletop").state_dict()
    assert not torch.equal(want["projector.fc1.weight"], base["projector.fc1.weight"])
    out = export_policy(str(tmp_path / "lora.ckpt"), str(tmp_path / "adapter"), adapter=True)
    assert out["adapter"] and sorted(p.name for p in (tmp_path / "adapter").iterdir()) == [
        ".wmrl_output.json", "adapter_config.json", "adapter_model.safetensors"]
    peft_model = PeftModel.from_pretrained(
        OpenVLAOFTPolicy.from_pretrained(str(source), unnorm_key="tabletop"),
        str(tmp_path / "adapter"))
    assert peft_model.peft_config["default"].base_model_name_or_path == str(source)
    obs = {"image": torch.randint(0, 256, (2, 40, 40, 3), dtype=torch.uint8),
           "task": ["pick up the red block"] * 2}
    tokens = back.sample(obs, 1.0).tokens
    ours = build_policy(pretrained_path=str(source), unnorm_key="tabletop",
                        lora={"path": str(tmp_path / "adapter")})  # policy.lora.path
    assert torch.equal(peft_model.base_model.model.log_probs(obs, tokens, 1.0),
                       ours.log_probs(obs, tokens, 1.0))
    assert all(torch.equal(v, adapters[f"policy.{k}"].float()) for k, v in
               ours.state_dict().items() if ".lora_" in k)  # the fit's adapters
    with pytest.raises(ConfigError, match="carries no LoRA adapter"):
        fit_checkpoint(tmp_path / "full.ckpt", source)
        export_policy(str(tmp_path / "full.ckpt"), str(tmp_path / "a2"), adapter=True)


def test_world_model_of_pace_goes_out_loadable(tmp_path):
    tiny_world_model().save_pretrained(tmp_path / "wm")
    refined = tiny_world_model()
    with torch.no_grad():
        for p in refined.transformer.parameters():
            p.add_(0.01)
    torch.save({"state_dict": {}, "global_step": 5,
                CONFIG_KEY: {"env": {"world_model": {"path": str(tmp_path / "wm")}}},
                "pace": {"version": 1, "world_model": trained_state(refined)}},
               tmp_path / "pace.ckpt")
    export_world_model(str(tmp_path / "pace.ckpt"), str(tmp_path / "out"))
    back = ActionWanModel.from_pretrained(tmp_path / "out").state_dict()
    assert all(torch.equal(back[k], v) for k, v in refined.state_dict().items())
    torch.save({"state_dict": {}, "global_step": 1, "pace": {"version": 0, "world_model": None}},
               tmp_path / "nopace.ckpt")
    with pytest.raises(ConfigError, match="holds no refined world model"):
        export_world_model(str(tmp_path / "nopace.ckpt"), str(tmp_path / "out2"))


def test_bad_input_is_one_line(source, tmp_path):
    def refused(ckpt: Path, out: Path) -> str:
        with pytest.raises(ConfigError) as err:
            export_policy(str(ckpt), str(out))
        assert "\n" not in str(err.value)
        return str(err.value)

    assert refused(tmp_path / "nope.ckpt", tmp_path / "o") == (
        f"{tmp_path / 'nope.ckpt'} does not exist: pass a checkpoint that "
        "scripts/fit.py wrote (<run_dir>/checkpoints/last.ckpt)")
    (tmp_path / "junk.ckpt").write_text("not a checkpoint")
    assert "is not a Lightning checkpoint" in refused(tmp_path / "junk.ckpt", tmp_path / "o")
    torch.save({"state_dict": {"model.w": torch.zeros(1)}, "global_step": 1},
               tmp_path / "other.ckpt")
    assert "holds no policy weights" in refused(tmp_path / "other.ckpt", tmp_path / "o")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    fit_checkpoint(tmp_path / "last.ckpt", source)
    assert refused(tmp_path / "last.ckpt", tmp_path / "full") == (
        f"--out={tmp_path / 'full'} holds files wmrl's policy did not write (x): pick "
        "a new or empty folder, or pass --force to replace it (everything in it is deleted)")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["x"]
    with pytest.raises(ConfigError, match="is policy's output, not world_model's"):
        export_world_model(str(tmp_path / "last.ckpt"), str(source))  # before any reading
    assert "is a file" in refused(tmp_path / "last.ckpt", tmp_path / "full" / "x")
    # a checkpoint cut short in a copy, as a user runs the script: one line, no traceback
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes((tmp_path / "last.ckpt").read_bytes()[:4000])
    res = subprocess.run([sys.executable, "scripts/export.py", str(cut), "--out",
                          str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and len(lines[0]) <= len("export: ") + 300
    assert lines[0].startswith("export: ") and "checkpoint" in lines[0], res.stderr
    assert not (tmp_path / "o").exists()
    assert export_policy(str(tmp_path / "last.ckpt"), str(tmp_path / "o"))["source"] == str(
        source)
    (tmp_path / "o" / "README.md").unlink()  # an earlier export of the policy: replaced whole
    export_policy(str(tmp_path / "last.ckpt"), str(tmp_path / "o"))
    assert (tmp_path / "o" / "README.md").is_file()
    export_policy(str(tmp_path / "last.ckpt"), str(tmp_path / "full"), force=True)
    assert not (tmp_path / "full" / "x").exists()
