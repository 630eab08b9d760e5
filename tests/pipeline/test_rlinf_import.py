"""scripts/import_rlinf.py / wmrl.pipeline.rlinf: a tiny DiT in the release's layout
(original-Wan / DiffSynth key names, the fork's action modules, no text embedding; the key list
of docs/reference/rlinf_wovr_release.md) becomes a directory ActionWanModel loads, every tensor
where the rename table puts it; other files are refused naming what is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLWan
from safetensors.torch import load_file, save_file

from wmrl.asset_checks import check_initial_states, check_world_model
from wmrl.errors import one_line
from wmrl.pipeline.rlinf.common import ImportRefused
from wmrl.pipeline.rlinf.dit import dit_name, import_dit, plan_dit, release_dit_shapes
from wmrl.pipeline.rlinf.release import REFUSALS, import_release
from wmrl.pipeline.rlinf.reset_data import import_reset_data
from wmrl.pipeline.rlinf.vae import import_vae
from wmrl.world_model.action_wan import ActionWanModel

ROOT = Path(__file__).resolve().parents[2]
DIM, HEADS, FFN, LAYERS, CH, FREQ = 32, 2, 48, 2, 4, 16  # head width 16: num_heads given


def release_dit(layers=LAYERS, dtype=torch.float32, seed=0) -> dict[str, torch.Tensor]:
    """The fork's WanModel state dict at a tiny size (TI2V2: action_mlp1 + action_mlp2, no
    text_embedding), random values."""
    g = torch.Generator().manual_seed(seed)
    shapes = release_dit_shapes(dim=DIM, ffn=FFN, channels=CH, freq_dim=FREQ, layers=layers)
    return {k: (torch.randn(s, generator=g) * 0.2).to(dtype) for k, s in shapes.items()}


def tiny_vae(root: Path, z: int = CH) -> None:
    """A random diffusers VAE beside an imported DiT (the DiT tests never decode)."""
    torch.manual_seed(0)
    AutoencoderKLWan(base_dim=8, z_dim=z, dim_mult=[1, 2], num_res_blocks=1,
                     temperal_downsample=[True], latents_mean=[0.0] * z,
                     latents_std=[1.0] * z).save_pretrained(root / "vae")


def test_rename_table_by_hand():
    assert dit_name("blocks.3.self_attn.o.weight") == "blocks.3.attn1.to_out.0.weight"
    assert dit_name("blocks.0.cross_attn.k.bias") == "blocks.0.attn2.to_k.bias"
    assert dit_name("blocks.12.cross_attn.norm_q.weight") == "blocks.12.attn2.norm_q.weight"
    assert dit_name("blocks.1.norm3.bias") == "blocks.1.norm2.bias"
    assert dit_name("blocks.1.ffn.0.weight") == "blocks.1.ffn.net.0.proj.weight"
    assert dit_name("blocks.1.ffn.2.weight") == "blocks.1.ffn.net.2.weight"
    assert dit_name("blocks.7.modulation") == "blocks.7.scale_shift_table"
    assert dit_name("head.modulation") == "scale_shift_table"
    assert dit_name("head.head.weight") == "proj_out.weight"
    assert dit_name("time_projection.1.bias") == "condition_embedder.time_proj.bias"
    assert dit_name("time_embedding.2.weight") == "condition_embedder.time_embedder.linear_2.weight"
    with pytest.raises(ImportRefused, match="vace_blocks"):
        dit_name("vace_blocks.0.proj.weight")


def test_import_loads_with_every_tensor_in_place(tmp_path):
    src = release_dit()
    save_file(src, str(tmp_path / "model-00001.safetensors"))
    info = import_dit([tmp_path / "model-00001.safetensors"], tmp_path / "wm", num_heads=HEADS,
                      text_dim=8)
    assert info["dit_tensors"] == 11 + LAYERS * 27 and info["action_tensors"] == 8
    cfg = info["transformer"]
    assert (cfg["num_layers"], cfg["num_attention_heads"], cfg["attention_head_dim"],
            cfg["ffn_dim"], cfg["in_channels"], cfg["out_channels"], cfg["freq_dim"],
            cfg["patch_size"]) == (LAYERS, HEADS, DIM // HEADS, FFN, CH, CH, FREQ, [1, 2, 2])
    acfg = json.loads((tmp_path / "wm/action/config.json").read_text())
    assert acfg["num_text_tokens"] == 0 and acfg["actions_per_latent"] == 4
    tiny_vae(tmp_path / "wm")
    model = ActionWanModel.from_pretrained(tmp_path / "wm")
    sd = model.transformer.state_dict()
    for n in range(LAYERS):
        torch.testing.assert_close(sd[f"blocks.{n}.attn1.to_out.0.weight"],
                                   src[f"blocks.{n}.self_attn.o.weight"], rtol=0, atol=0)
        torch.testing.assert_close(sd[f"blocks.{n}.norm2.weight"], src[f"blocks.{n}.norm3.weight"],
                                   rtol=0, atol=0)
        torch.testing.assert_close(sd[f"blocks.{n}.scale_shift_table"],
                                   src[f"blocks.{n}.modulation"], rtol=0, atol=0)
    torch.testing.assert_close(sd["scale_shift_table"], src["head.modulation"], rtol=0, atol=0)
    assert sd["condition_embedder.text_embedder.linear_1.weight"].abs().sum() == 0
    asd = model.action.state_dict()
    torch.testing.assert_close(asd["action_mlp2.0.weight"], src["action_mlp2.0.weight"])
    assert asd["null_context"].shape == (0, 8)
    # the fork's context: the 13 action tokens alone; actions change the velocity
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, CH, 4, 4, 4, generator=g)
    ts = torch.tensor([[0.0, 0.0, 700.0, 700.0]] * 2)
    a = torch.rand(2, 13, 7, generator=g) * 2 - 1
    with torch.no_grad():
        v1, v2 = model.velocity(x, ts, a), model.velocity(x, ts, a.flip(1))
    assert v1.shape == x.shape and torch.isfinite(v1).all()
    assert (v1 - v2).abs().max() > 1e-3


def test_bf16_shards_in_and_out(tmp_path, capsys):
    src = release_dit(dtype=torch.bfloat16, seed=3)
    keys = sorted(src)
    save_file({k: src[k] for k in keys[:40]}, str(tmp_path / "a.safetensors"))
    save_file({"model." + k: src[k] for k in keys[40:]}, str(tmp_path / "b.safetensors"))
    info = import_dit([tmp_path / "a.safetensors", tmp_path / "b.safetensors"], tmp_path / "wm",
                      num_heads=HEADS, text_dim=8, shard_bytes=20_000)
    assert info["shards"] > 1
    assert "[import] transformer" in capsys.readouterr().err  # a 5B DiT converts for minutes
    tdir = tmp_path / "wm/transformer"
    index = json.loads((tdir / "diffusion_pytorch_model.safetensors.index.json").read_text())
    stored = {}
    for f in sorted(set(index["weight_map"].values())):
        part = load_file(str(tdir / f))
        assert all(t.dtype == torch.bfloat16 for t in part.values())
        assert sum(t.numel() * 2 for t in part.values()) <= 20_000 or len(part) == 1
        stored.update(part)
    assert set(stored) == set(index["weight_map"])
    torch.testing.assert_close(stored["proj_out.weight"], src["head.head.weight"], rtol=0, atol=0)
    tiny_vae(tmp_path / "wm")
    model = ActionWanModel.from_pretrained(tmp_path / "wm", dtype="bfloat16")
    assert model.transformer.dtype == torch.bfloat16
    check_world_model(str(tmp_path / "wm"))  # fit's header checks pass the sharded layout


def _refused(tmp_path, tensors: dict, match: str, **kw):
    path = tmp_path / "model-00001.safetensors"
    save_file(tensors, str(path))
    with pytest.raises(ImportRefused, match=match):
        import_dit([path], tmp_path / "out", num_heads=HEADS, **kw)


def test_other_files_are_refused_by_name(tmp_path):
    src = release_dit()
    _refused(tmp_path, {**src, "vace_blocks.0.proj.weight": torch.zeros(2)},
             r"another architecture.*vace_blocks\.0\.proj\.weight")
    no_action = {k: v for k, v in src.items() if not k.startswith("action_mlp")}
    _refused(tmp_path, no_action, "no action modules")
    with_text = {**src, "text_embedding.0.weight": torch.zeros(DIM, 8),
                 "text_embedding.0.bias": torch.zeros(DIM)}
    _refused(tmp_path, with_text, r"missing \['condition_embedder.text_embedder.linear_2")
    bad = dict(src, **{"blocks.1.ffn.0.weight": torch.zeros(FFN + 1, DIM)})
    _refused(tmp_path, bad, "shape mismatches")
    pth = tmp_path / "Wan2.2_VAE.pth"
    torch.save({"x": torch.zeros(1)}, pth)
    with pytest.raises(ImportRefused, match="expected the release's model-\\*.safetensors"):
        import_dit([pth], tmp_path / "out")
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(ImportRefused, match="not a readable safetensors file"):
        import_dit([broken], tmp_path / "out")
    save_file(src, str(tmp_path / "m.safetensors"))
    with pytest.raises(ImportRefused, match="pass num_heads"):
        import_dit([tmp_path / "m.safetensors"], tmp_path / "out")  # dim 32: no 128-wide heads


def test_cli_prints_one_json_line_and_refuses_with_exit_2(tmp_path, monkeypatch, capsys):
    """The import through the script's ``__main__`` in this process (exit 0, one JSON line);
    a refusal as a program of its own: a fresh Python, exit 2, the reason on stderr."""
    import runpy

    script = str(ROOT / "scripts/import_rlinf.py")
    save_file(release_dit(), str(tmp_path / "model-00001.safetensors"))
    cmd = [script, "--dit", str(tmp_path / "model-00001.safetensors"), "--out",
           str(tmp_path / "wm"), "--num-heads", str(HEADS), "--text-dim", "8"]
    monkeypatch.setattr(sys, "argv", cmd)
    with pytest.raises(SystemExit) as done:
        runpy.run_path(script, run_name="__main__")
    out = capsys.readouterr().out
    assert done.value.code == 0 and len(out.strip().splitlines()) == 1, out
    assert json.loads(out)["action"]["num_text_tokens"] == 0
    assert (tmp_path / "wm" / "action" / "config.json").is_file()
    run = subprocess.run([sys.executable, *cmd[:2], str(tmp_path / "missing.safetensors"),
                          *cmd[3:]], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 2 and "no such file" in run.stderr and not run.stdout


def test_the_5b_release_key_table_is_the_forks_registered_model_and_plans(tmp_path):
    """The release's DiT at full size, as a key -> shape table (no tensors): the DiffSynth
    fork recognises a checkpoint by the md5 of its sorted "key:shape" and "key" strings, and
    registers bc4824aef7c3f23d3378cec6e2b1316c as "5B TI2V action" (its model_config.py, the
    entry RLinf's release loads as); this table hashes to it, so every key the importer maps
    is a key of the published file. It plans to the published 5B config."""
    import hashlib

    shapes = release_dit_shapes()
    strings = sorted([f"{k}:{'_'.join(map(str, v))}" for k, v in shapes.items()] + list(shapes))
    assert hashlib.md5(",".join(strings).encode()).hexdigest() == \
        "bc4824aef7c3f23d3378cec6e2b1316c"
    plan = plan_dit(shapes)
    cfg = plan["transformer"]
    assert (cfg["num_layers"], cfg["num_attention_heads"], cfg["attention_head_dim"],
            cfg["ffn_dim"], cfg["in_channels"], cfg["out_channels"], cfg["freq_dim"],
            cfg["text_dim"], cfg["patch_size"]) == (30, 24, 128, 14336, 48, 48, 256, 4096,
                                                     [1, 2, 2])
    assert plan["action"]["actions_per_latent"] == 4 and plan["action"]["action_dim"] == 7
    assert len(plan["names"]) == 829 - 8  # every DiT key; 8 action tensors go to action/
    assert 4.9e9 < plan["total_params"] < 5.1e9  # the 5B (with the zero text embedder)


# ---- the Wan2.2 VAE, against Wan2.2's own code ----------------------------------------------
FIXTURES = ROOT / "tests" / "fixtures" / "rlinf"


def test_vae_import_reproduces_wan22s_own_encode_and_decode(tmp_path):
    """wan22_vae_tiny.pth and its encode / decode were made with Wan2.2's WanVAE_
    (make_wan22_vae_fixture.py); the imported diffusers AutoencoderKLWan must agree."""
    io = load_file(str(FIXTURES / "wan22_vae_tiny_io.safetensors"))
    info = import_vae(FIXTURES / "wan22_vae_tiny.pth", tmp_path / "wm",
                      latents_mean=io["latents_mean"].tolist(),
                      latents_std=io["latents_std"].tolist())
    cfg = info["vae"]
    assert (cfg["base_dim"], cfg["decoder_base_dim"], cfg["z_dim"], cfg["dim_mult"],
            cfg["num_res_blocks"], cfg["temperal_downsample"], cfg["patch_size"],
            cfg["scale_factor_spatial"], cfg["scale_factor_temporal"]) == (
        4, 4, 4, [1, 2, 4, 4], 2, [False, True, True], 2, 16, 4)
    vae = AutoencoderKLWan.from_pretrained(tmp_path / "wm" / "vae").eval()
    mean = torch.tensor(cfg["latents_mean"]).view(1, -1, 1, 1, 1)
    std = torch.tensor(cfg["latents_std"]).view(1, -1, 1, 1, 1)
    with torch.no_grad():
        mu = vae.encode(io["video"]).latent_dist.mode()
        latents = (mu - mean) / std
        recon = vae.decode(io["latents"] * std + mean).sample
    scale = io["latents"].abs().max()
    assert (latents - io["latents"]).abs().max() <= 1e-4 * scale
    assert (recon - io["recon"]).abs().max() <= 1e-4 * io["recon"].abs().max()


def test_vae_import_refuses_other_files(tmp_path):
    pickled = tmp_path / "Wan2.2_VAE.pth"
    torch.save({"model": nn_module_stub()}, pickled)
    with pytest.raises(ImportRefused, match="not a weights-only torch checkpoint"):
        import_vae(pickled, tmp_path / "out")
    state = torch.load(FIXTURES / "wan22_vae_tiny.pth", weights_only=True)
    torch.save({**state, "encoder.extra.weight": torch.zeros(1)}, tmp_path / "extra.pth")
    with pytest.raises(ImportRefused, match="'encoder.extra.weight' is not a Wan2.2 VAE key"):
        import_vae(tmp_path / "extra.pth", tmp_path / "out", latents_mean=[0.0] * 4,
                   latents_std=[1.0] * 4)
    with pytest.raises(ImportRefused, match="z_dim 4 is not Wan2.2's 48"):
        import_vae(FIXTURES / "wan22_vae_tiny.pth", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="no such file"):
        import_vae(tmp_path / "missing.pth", tmp_path / "out")


def nn_module_stub():
    return torch.nn.Linear(2, 2)  # a pickled module, not a state dict of tensors


# ---- the DiT, against the DiffSynth fork's own WanModel + model_fn_wan_video -----------------
def test_dit_import_matches_the_forks_model_fn(tmp_path):
    """rlinf_dit_tiny.* were made with the fork's WanModel and model_fn_wan_video, called as
    RLinf's WanEnv calls it (make_rlinf_dit_fixture.py): the imported ActionWanModel, under the
    fork's conditioning recorded in action/config.json, gives the same velocity."""
    io = load_file(str(FIXTURES / "rlinf_dit_tiny_io.safetensors"))
    info = import_dit([FIXTURES / "rlinf_dit_tiny.safetensors"], tmp_path / "wm", num_heads=2,
                      text_dim=16)
    assert info["dit_tensors"] + info["action_tensors"] == 73  # every tensor of the fork's model
    tiny_vae(tmp_path / "wm", z=8)
    model = ActionWanModel.from_pretrained(tmp_path / "wm").eval()
    x, t = io["latents"], float(io["timestep"])
    ts = torch.tensor([[0.0, 0.0, t, t]] * x.shape[0])  # condition latents at timestep 0
    with torch.no_grad():
        v = model.velocity(x, ts, io["actions"])
        v2 = model.velocity(x, ts, io["actions2"])
    for got, want in ((v, io["velocity"]), (v2, io["velocity2"])):
        assert (got - want).abs().max() <= 1e-4 * want.abs().max()
    assert (io["velocity"] - io["velocity2"]).abs().max() > 0.1  # actions matter, in both


# ---- the reset data, against RLinf's own reader ------------------------------------------------
def test_reset_data_import_matches_rlinfs_reader_and_wanenv_reset(tmp_path):
    """dataset/ was read by RLinf's NpyTrajectoryDatasetWrapper (make_rlinf_dataset_fixture.py):
    state i is the reader's episode i; anchor = its start frame; KIR context = its last 4
    frames and actions when it has 4 (else frame 0 repeated, zero actions, gripper open), as
    WanEnv.reset substitutes them."""
    from wmrl.envs.initial_states import load_initial_states

    want = load_file(str(FIXTURES / "rlinf_dataset_expected.safetensors"))
    meta = json.loads((FIXTURES / "rlinf_dataset_expected.json").read_text())
    info = import_reset_data(FIXTURES / "dataset", tmp_path / "wm")
    assert (info["states"], info["kir_states"], info["image"]) == (5, 2, [32, 32, 3])
    states = load_initial_states(tmp_path / "wm" / "initial_states")
    sources = json.loads((tmp_path / "wm/initial_states/sources.json").read_text())
    assert sources == meta["files"] and states.tasks == meta["tasks"]
    to_u8 = lambda x: (x * 255).round().to(torch.uint8).permute(*range(x.ndim - 3), -2, -1, -3)  # noqa: E731
    for i in range(len(states)):
        anchor = to_u8(want[f"{i}.start_image"])
        assert torch.equal(states.frames[i], anchor)
        targets = want[f"{i}.target_images"]
        if targets.shape[0] == 4:
            assert torch.equal(states.context_frames[i], to_u8(targets))
            torch.testing.assert_close(states.context_actions[i], want[f"{i}.target_actions"])
        else:
            assert torch.equal(states.context_frames[i], anchor[None].expand(4, -1, -1, -1))
            assert states.context_actions[i].tolist() == [[0.0] * 6 + [-1.0]] * 4
    plain = import_reset_data(FIXTURES / "dataset", tmp_path / "plain", enable_kir=False)
    assert plain["states"] == 3 and plain["kir_states"] == 1  # traj10.npy has 5 frames
    check_initial_states(str(tmp_path / "wm" / "initial_states"), kir_reset=True)  # fit's checks
    check_initial_states(plain["initial_states"])


def test_reset_data_refuses_what_is_not_a_trajectory(tmp_path):
    import pickle as pkl

    bad = tmp_path / "evil"
    bad.mkdir()
    payload = np.array([{"image": np.zeros((4, 4, 3), np.uint8)}], dtype=object)
    np.save(bad / "traj0.npy", payload, allow_pickle=True)
    raw = (bad / "traj0.npy").read_bytes()
    # the same header, a pickle that names os.system: refused before anything runs
    header_end = raw.index(b"\n") + 1
    evil = raw[:header_end] + pkl.dumps(Evil(), protocol=3)
    (bad / "traj0.npy").write_bytes(evil)
    with pytest.raises(ImportRefused, match="posix.system is not a numpy array part|"
                                            "os.system is not a numpy array part"):
        import_reset_data(bad, tmp_path / "out")
    noaction = tmp_path / "noaction"
    noaction.mkdir()
    np.save(noaction / "traj0.npy", payload, allow_pickle=True)
    with pytest.raises(ImportRefused, match="no 'delta_action'"):
        import_reset_data(noaction, tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImportRefused, match="no \\*.npy trajectory files"):
        import_reset_data(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="no such directory"):
        import_reset_data(tmp_path / "missing", tmp_path / "out")


class Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


# ---- the script: every input checked first, the output whole or not at all -------------------
class _Hostile:
    """Unpickling this runs a command: what a weights-only loader must refuse."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def _refusal(out, **kw) -> str:
    """What the script prints for ``import_release``'s refusal (one line, exit 2)."""
    with pytest.raises(REFUSALS) as err:
        import_release(**{"num_heads": HEADS, "text_dim": 8, **kw}, out=out)
    return one_line(err.value)


def test_bad_inputs_are_refused_before_any_conversion_and_leave_out_as_it_was(tmp_path):
    dit = [tmp_path / "model-00001.safetensors"]
    save_file(release_dit(), str(dit[0]))
    hostile = tmp_path / "Wan2.2_VAE.pth"
    torch.save({"encoder.conv1.weight": _Hostile(tmp_path / "pwned")}, hostile)
    npy_dir = tmp_path / "dataset"
    npy_dir.mkdir()
    np.save(npy_dir / "traj0.npy", np.arange(5))  # not a trajectory of per-frame dicts
    (tmp_path / "a_file").write_text("x")
    out = tmp_path / "wm"
    cases = [(dict(vae=hostile, out=out), "not a weights-only torch checkpoint"),
             (dict(dataset=npy_dir, out=out), "per-frame dicts"),
             (dict(out=tmp_path / "a_file"), "is a file")]
    for kw, want in cases:
        err = _refusal(dit=dit, **kw)
        assert want in err and len(err) <= 300, err
    assert not (tmp_path / "pwned").exists()  # the hostile pickle never ran
    assert not out.exists()  # nothing converted: the DiT was fine but a later input was not
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["model-00001.safetensors", "Wan2.2_VAE.pth", "dataset", "a_file"])  # no temp dirs
    # a user's --out is refused in one line before anything is read; an earlier import is
    # replaced whole; --force replaces the user's folder
    out.mkdir()
    (out / "notes.txt").write_text("kept")
    assert _refusal(out, dit=dit) == (f"--out={out} holds files wmrl's import_rlinf did not "
                                      "write (notes.txt): pick a new or empty folder, or pass "
                                      "--force to replace it (everything in it is deleted)")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    _refusal(out, dit=dit, vae=hostile, force=True)
    assert (out / "notes.txt").read_text() == "kept"  # refused input: as it was
    import_release(dit, out, num_heads=HEADS, text_dim=8, force=True)
    assert not (out / "notes.txt").exists() and (out / "transformer" / "config.json").is_file()
    (out / "transformer" / "config.json").unlink()
    import_release(dit, out, num_heads=HEADS, text_dim=8)  # its own earlier output: replaced
    assert (out / "transformer" / "config.json").is_file()


def test_release_vae_shapes_are_wan22s_own_layout():
    """``release_vae_shapes`` (the importer's rename run backwards, each name checked to come
    back): at the fixture's tiny width, exactly the key / shape table of the state dict Wan2.2's
    own ``WanVAE_`` saved; at Wan2.2's width, the published VAE's 704,688,668 parameters, whose
    shapes ``vae_config`` reads back as the config they came from (a full-size release VAE for
    checks before renting GPUs, without the 2.8 GB download)."""
    import math

    from wmrl.pipeline.rlinf.vae import release_vae_shapes, vae_config

    state = torch.load(FIXTURES / "wan22_vae_tiny.pth", weights_only=True)
    want = {k: tuple(v.shape) for k, v in state.items()}
    assert release_vae_shapes(vae_config(want, [0.0] * 4, [1.0] * 4)) == want
    wan22 = dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4],
                 num_res_blocks=2, attn_scales=[], temperal_downsample=[False, True, True],
                 is_residual=True, in_channels=12, out_channels=12, patch_size=2)
    full = release_vae_shapes(wan22)
    assert sum(math.prod(s) for s in full.values()) == 704_688_668 and full.keys() == want.keys()
    back = vae_config(full)
    assert {k: back[k] for k in wan22} == wan22
