"""Damaged model files and absent devices, refused before Ray or any model starts
(``wmrl.config.check_paths``): one line ``<config key>: <path>: <what is wrong>; <what to do>``.

Only headers and configs are read, never a weight: a safetensors file's header must parse and
cover the file exactly (``safetensors.safe_open`` refuses a truncated or non-safetensors file),
and the tensor names and shapes it lists must be those of the model its ``config.json``
describes, built on the meta device by the constructor that loads it (policy, world-model DiT,
VAE and action modules, reward classifier). A ``.pth`` reward (small) is read with
``torch.load(weights_only=True)`` and must be a state dict of tensors. The initial-states
directory must hold at least one state, one task string per state, and the KIR context when
``env.kir_reset`` asks for it.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from safetensors import safe_open

from wmrl.envs.initial_states import FORMAT, TASKS, TENSORS
from wmrl.errors import ConfigError
from wmrl.policies import action_tokenizer as at
from wmrl.policies.checkpoint import is_policy_dir
from wmrl.policies.openvla_oft import build_policy, build_policy_meta
from wmrl.rewards.resnet import (
    ResNetSuccessReward,
    TaskResNetSuccessReward,
    build_classifier,
)
from wmrl.weights.safetensors_shards import INDEX_NAME
from wmrl.world_model.files import ACTION_WEIGHTS, CONFIG_FILES

__all__ = ["check_accelerator", "check_assets", "safetensors_shapes"]

Shapes = dict[str, tuple[int, ...]]
POLICY_FIX = "copy the checkpoint again, or point policy.pretrained_path at an intact one"
WM_FIX = ("copy the world model again (or re-run scripts/import_rlinf.py), or point "
          "env.world_model.path at an intact one")
STATES_FIX = ("point env.initial_states at a directory written by "
              "wmrl.envs.initial_states.write_initial_states (scripts/import_rlinf.py writes "
              "<out>/initial_states)")
REWARD_FIX = ("copy the reward checkpoint again, or point reward.checkpoint at one that "
              "scripts/train_reward.py wrote (model.safetensors + config.json) or a state dict")
REWARDS = {f"{c.__module__}.{c.__name__}": c
           for c in (ResNetSuccessReward, TaskResNetSuccessReward)}
WM_WEIGHTS = "diffusion_pytorch_model.safetensors"  # diffusers' name (and <name>.index.json)
POLICY_TARGET = f"{build_policy.__module__}.{build_policy.__name__}"


def _why(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200] if lines else ''}"


def safetensors_shapes(path: str | os.PathLike, key: str, fix: str) -> Shapes:
    """Tensor name -> shape from a safetensors header. ``safe_open`` parses the header and
    refuses a file whose tensors do not cover it exactly (truncated, padded, not safetensors)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as err:  # noqa: BLE001 - any unreadable header is the same user error
        why = str(err).strip().splitlines()[0].removeprefix("Error while deserializing header: ")
        raise ConfigError(f"{key}: {path}: not a whole safetensors file (safetensors: {why[:200]}"
                          f"): truncated, damaged or another format; {fix}") from None


def _read_json(path: Path, key: str, fix: str) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"{key}: {path}: not a readable JSON file ({_why(err)}); {fix}") from None


def _meta_shapes(module: torch.nn.Module) -> Shapes:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def _compare(found: Shapes, expected: Shapes, key: str, weights: Any, config: Any,
             fix: str) -> None:
    """One line naming the first missing / unexpected keys and wrong shapes, if any.
    ``config``: the config.json the expected shapes come from, or the config key."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong = [f"{k} {list(found[k])} (config: {list(expected[k])})"
             for k in sorted(set(found) & set(expected)) if found[k] != expected[k]]
    if not (missing or unexpected or wrong):
        return
    parts = [f"{len(wrong)} shapes differ: {', '.join(wrong[:2])}"] if wrong else []
    parts += [f"{len(missing)} tensors missing: {', '.join(missing[:3])}"] if missing else []
    parts += [f"{len(unexpected)} unexpected: {', '.join(unexpected[:3])}"] if unexpected else []
    todo = (f"restore the config.json that came with these weights, or {fix}"
            if str(config).endswith(".json") else f"set {config} to the sizes these weights "
            f"were trained with, or {fix}")
    raise ConfigError(f"{key}: {config}: does not match the weights in {weights} "
                      f"({'; '.join(parts)}); {todo}")


def _weight_shapes(folder: Path, index_name: str, pattern: str, key: str,
                  fix: str) -> tuple[Shapes | None, str]:
    """The tensors of the shards ``index_name`` lists (each listed tensor must be in its
    shard), else of the files matching ``pattern``, as the loaders read them; and a name for
    messages. (None, ...) for a pickled diffusers folder (``*.bin``): not read here."""
    index = folder / index_name
    if index.is_file():
        weight_map = _read_json(index, key, fix).get("weight_map") or {}
        found: Shapes = {}
        for name in sorted(set(weight_map.values())):
            shard = folder / name
            if not shard.is_file():
                raise ConfigError(f"{key}: {index}: lists {name}, which is not in {folder}; {fix}")
            shapes = safetensors_shapes(shard, key, fix)
            listed = [k for k, v in weight_map.items() if v == name]
            absent = sorted(k for k in listed if k not in shapes)
            if absent:
                raise ConfigError(f"{key}: {index}: lists {absent[:3]} in {name}, which does "
                                  f"not hold them ({len(absent)} in all); {fix}")
            found.update({k: shapes[k] for k in listed})
        return found, str(index)
    files = sorted(glob.glob(str(folder / pattern)))
    if not files:
        if glob.glob(str(folder / "*.bin")):
            return None, str(folder)
        raise ConfigError(f"{key}: {folder}: no {pattern} (or {index_name} + its shards); {fix}")
    found = {}
    for fn in files:
        found.update(safetensors_shapes(fn, key, fix))
    return found, files[0] if len(files) == 1 else f"{folder}/{pattern}"


# ---- the policy ---------------------------------------------------------------------------------
def check_policy(policy: Mapping, key: str = "policy.pretrained_path") -> None:
    """``policy.pretrained_path``: config.json parses, every weight file's header is whole, and
    the tensors are the ones the OpenVLA-OFT built from that config.json (plus ``overrides``,
    less ``ignore_key_prefixes``) loads, with the same shapes; ``unnorm_key`` is in the
    statistics."""
    root = Path(str(policy["pretrained_path"]))
    if not root.is_dir():
        raise ConfigError(f"{key}: {root}: not a directory; point it at a save_pretrained "
                          "policy directory (config.json + safetensors)")
    if not is_policy_dir(root):
        raise ConfigError(f"{key}: {root}: has no config.json; {POLICY_FIX}")
    config = root / "config.json"
    _read_json(config, key, POLICY_FIX)
    found, weights = _weight_shapes(root, INDEX_NAME, "*.safetensors", key, POLICY_FIX)
    if policy.get("_target_") != POLICY_TARGET:
        return  # another policy class: its files are whole, its shapes are its own business
    # the base's tensors (LoRA adapters are not in its files; an adapter path is checked
    # when it loads, before any rollout)
    args = {k: v for k, v in policy.items() if k not in ("_target_", "lora")}
    try:
        model = build_policy_meta(**args)
    except Exception as err:  # noqa: BLE001 - the config.json cannot describe this policy
        raise ConfigError(f"{key}: {config}: does not describe an OpenVLA-OFT policy "
                          f"({_why(err)}); {POLICY_FIX}") from None
    ignore = tuple(policy.get("ignore_key_prefixes") or ())
    found = {k: v for k, v in found.items() if not k.startswith(ignore)} if ignore else found
    _compare(found, _meta_shapes(model), key, weights, config, POLICY_FIX)
    try:
        at.ActionStats(model.config.get("norm_stats") or {}, policy.get("unnorm_key"),
                       model.action_dim)
    except (KeyError, ValueError) as err:
        msg = err.args[0] if err.args else str(err)
        raise ConfigError(f"policy.unnorm_key: {root}: {msg}; set policy.unnorm_key to a "
                          "dataset of its dataset_statistics.json") from None


# ---- the world model ----------------------------------------------------------------------------
def check_world_model(path: str, key: str = "env.world_model.path") -> None:
    """transformer/ and vae/ (diffusers layout) and action/: config.json files parse, headers
    are whole, shapes are those of the modules the configs build, and the three fit together
    (the checks ``ActionWanModel`` makes when it is built)."""
    # here, not at the top: every process that imports wmrl.config imports this module
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from diffusers.utils import logging as dlog

    root = Path(path)
    missing = [p for p in (*CONFIG_FILES, f"action/{ACTION_WEIGHTS}")
               if not (root / p).is_file()]
    if missing:
        raise ConfigError(f"{key}: {root}: not a world-model directory, missing {missing} "
                          f"(expected transformer/, vae/ and action/); {WM_FIX}")
    configs = {}
    for sub, cls in (("transformer", WanTransformer3DModel), ("vae", AutoencoderKLWan)):
        config = root / sub / "config.json"
        configs[sub] = cfg = _read_json(config, key, WM_FIX)
        found, weights = _weight_shapes(root / sub, f"{WM_WEIGHTS}.index.json", WM_WEIGHTS,
                                        key, WM_FIX)
        verbosity = dlog.get_verbosity()
        dlog.set_verbosity_error()
        try:
            with torch.device("meta"):
                model = cls.from_config(cfg)
        except Exception as err:  # noqa: BLE001 - the config.json cannot build the module
            raise ConfigError(f"{key}: {config}: does not describe a {cls.__name__} "
                              f"({_why(err)}); {WM_FIX}") from None
        finally:
            dlog.set_verbosity(verbosity)
        if found is not None:
            _compare(found, _meta_shapes(model), key, weights, config, WM_FIX)
    t, v = configs["transformer"], configs["vae"]
    acfg_path = root / "action" / "config.json"
    acfg = _read_json(acfg_path, key, WM_FIX)
    inner = (t.get("num_attention_heads") or 0) * (t.get("attention_head_dim") or 0)
    clash = [f"transformer in_channels {t.get('in_channels')} != vae z_dim {v.get('z_dim')}"
             ] if t.get("in_channels") != v.get("z_dim") else []
    clash += [f"action dim {acfg.get('dim')} != transformer heads x head dim {inner}"
              ] if acfg.get("dim") != inner else []
    clash += [f"action text_dim {acfg.get('text_dim')} != transformer text_dim "
              f"{t.get('text_dim')}"] if acfg.get("text_dim") != t.get("text_dim") else []
    if clash:
        raise ConfigError(f"{key}: {root}: the config.json files do not fit together ("
                          f"{'; '.join(clash)}); {WM_FIX}")
    weights = root / "action" / "action_modules.safetensors"
    found = safetensors_shapes(weights, key, WM_FIX)
    _compare(found, action_module_shapes(acfg), key, weights, acfg_path, WM_FIX)


def action_module_shapes(acfg: Mapping) -> Shapes:
    """The state-dict shapes of ``wmrl.world_model.action_wan.ActionConditioner(**acfg)``
    (written out: importing that module imports diffusers in every process that imports
    ``wmrl.config``; tests/test_asset_checks.py compares the two)."""
    dim, text_dim = int(acfg["dim"]), int(acfg["text_dim"])
    a, k = int(acfg.get("action_dim", 7)), int(acfg.get("actions_per_latent", 4))
    return {"null_context": (int(acfg.get("num_text_tokens", 4)), text_dim),
            "action_mlp1.0.weight": (dim, a), "action_mlp1.0.bias": (dim,),
            "action_mlp1.2.weight": (dim, dim), "action_mlp1.2.bias": (dim,),
            "action_mlp2.0.weight": (k * dim, k * a), "action_mlp2.0.bias": (k * dim,),
            "action_mlp2.2.weight": (dim, k * dim), "action_mlp2.2.bias": (dim,)}


# ---- initial states -----------------------------------------------------------------------------
def check_initial_states(path: str, kir_reset: bool = False,
                         key: str = "env.initial_states") -> None:
    """initial_states.safetensors (whole; frames uint8 [N >= 1, H, W, 3], task_ids [N], the KIR
    context when ``kir_reset``) and tasks.json (one task per state)."""
    root = Path(path)
    if not root.is_dir():
        raise ConfigError(f"{key}: {root}: not a directory; {STATES_FIX}")
    absent = [n for n in (TENSORS, TASKS) if not (root / n).is_file()]
    if absent:
        what = "an empty directory" if not any(root.iterdir()) else f"no {' or '.join(absent)}"
        raise ConfigError(f"{key}: {root}: {what}, expected {TENSORS} and {TASKS}; {STATES_FIX}")
    shapes = safetensors_shapes(root / TENSORS, key, STATES_FIX)
    frames = shapes.get("frames")
    if frames is None or len(frames) != 4 or frames[-1] != 3 or frames[0] < 1:
        raise ConfigError(f"{key}: {root / TENSORS}: frames {frames}, expected [N >= 1, H, W, 3] "
                          f"(at least one initial state); {STATES_FIX}")
    n = frames[0]
    if shapes.get("task_ids") != (n,):
        raise ConfigError(f"{key}: {root / TENSORS}: task_ids {shapes.get('task_ids')}, "
                          f"expected [{n}] (one per frame); {STATES_FIX}")
    if kir_reset and "context_frames" not in shapes:
        raise ConfigError(f"{key}: {root / TENSORS}: no context_frames / context_actions, which "
                          "env.kir_reset=true starts from; set env.kir_reset=false or use "
                          "states written with their KIR context")
    meta = _read_json(root / TASKS, key, STATES_FIX)
    tasks = meta.get("tasks") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(tasks, list):
        raise ConfigError(f"{key}: {root / TASKS}: not a {FORMAT!r} task list; {STATES_FIX}")
    if len(tasks) != n:
        raise ConfigError(f"{key}: {root / TASKS}: {len(tasks)} tasks for {n} states in "
                          f"{TENSORS}; {STATES_FIX}")


# ---- the reward ---------------------------------------------------------------------------------
def check_reward(reward: Mapping, key: str = "reward.checkpoint") -> None:
    """A ResNet reward's ``checkpoint``: a directory (model.safetensors + config.json), a
    .safetensors file, or a .pth/.pt state dict of tensors; for the ResNet rewards, the
    tensors of the classifier its config (the checkpoint's config.json wins) builds."""
    path = Path(str(reward["checkpoint"]))
    ckpt_config = None
    if path.is_dir():
        weights, config = path / "model.safetensors", path / "config.json"
        if not weights.is_file():
            raise ConfigError(f"{key}: {path}: has no model.safetensors; {REWARD_FIX}")
        found = safetensors_shapes(weights, key, REWARD_FIX)
        if config.is_file():
            ckpt_config = _read_json(config, key, REWARD_FIX)
    elif path.suffix == ".safetensors":
        weights = path
        found = safetensors_shapes(path, key, REWARD_FIX)
    else:  # a .pth / .pt state dict, read as the reward reads it (small: ~45 MB at most)
        weights = path
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
            raise ConfigError(f"{key}: {path}: torch.load(weights_only=True) cannot read it "
                              f"({_why(err)}); {REWARD_FIX}") from None
        if isinstance(state, Mapping) and "model_state_dict" in state:
            state = state["model_state_dict"]  # as wmrl.rewards.resnet.load_state_dict_file
        if not isinstance(state, Mapping):
            raise ConfigError(f"{key}: {path}: holds a {type(state).__name__}, not a state dict "
                              f"(name -> tensor); {REWARD_FIX}")
        bad = [f"{k!r} is {type(v).__name__}" for k, v in state.items()
               if not (isinstance(k, str) and isinstance(v, torch.Tensor))]
        if bad:
            raise ConfigError(f"{key}: {path}: not a state dict of tensors ({', '.join(bad[:3])}"
                              f"{' ...' if len(bad) > 3 else ''}); {REWARD_FIX}")
        found = {k: tuple(v.shape) for k, v in state.items()}
    cls = REWARDS.get(str(reward.get("_target_")))
    if cls is None:
        return  # another reward: its files are whole, its shapes are its own business
    if ckpt_config is not None and ckpt_config.get("arch", cls.arch) != cls.arch:
        raise ConfigError(f"{key}: {path}/config.json: arch {ckpt_config.get('arch')!r}, "
                          f"{reward['_target_']} needs {cls.arch!r}; choose the reward group "
                          "that matches the checkpoint")
    try:
        scorer = cls(**{k: v for k, v in reward.items() if k != "_target_"})
        if ckpt_config is not None:
            scorer._adopt_checkpoint_config(ckpt_config)
        with torch.device("meta"):
            model = build_classifier(scorer.arch, scorer.config)
    except Exception as err:  # noqa: BLE001 - the configs cannot build the classifier
        raise ConfigError(f"{key}: {path}: its config cannot build the classifier "
                          f"({_why(err)}); {REWARD_FIX}") from None
    source = path / "config.json" if ckpt_config is not None else "reward.config"
    _compare(found, _meta_shapes(model), key, weights, source, REWARD_FIX)


# ---- all of them --------------------------------------------------------------------------------
def _container(cfg: Any, key: str) -> Any:
    value = OmegaConf.select(cfg, key, default=None) if OmegaConf.is_config(cfg) else None
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def check_assets(cfg: DictConfig) -> None:
    """Every local model file the run loads is whole and fits its config (headers only)."""
    policy = _container(cfg, "policy")
    if isinstance(policy, dict) and isinstance(policy.get("pretrained_path"), str):
        check_policy(policy)
    wm_path = OmegaConf.select(cfg, "env.world_model.path", default=None)
    if isinstance(wm_path, str):
        check_world_model(wm_path)
    states = OmegaConf.select(cfg, "env.initial_states", default=None)
    if isinstance(states, str):
        check_initial_states(states, bool(OmegaConf.select(cfg, "env.kir_reset", default=False)))
    reward = _container(cfg, "reward")
    if isinstance(reward, dict) and isinstance(reward.get("checkpoint"), str):
        check_reward(reward)


def check_accelerator(cfg: DictConfig) -> None:
    """``trainer.accelerator`` names a Lightning accelerator (its registry, with ``npu`` and
    ``musa`` from ``strategies``) that this machine has, with ``trainer.devices`` of them."""
    trainer = cfg.get("trainer") or {}
    name = trainer.get("accelerator", "auto")
    if not isinstance(name, str) or name == "auto":
        return
    # Lightning here, not at the top: this module is imported by rollout workers, which don't
    # need it (strategies/__init__.py)
    from lightning.pytorch.accelerators import AcceleratorRegistry

    from strategies import register_accelerators

    register_accelerators()
    known = AcceleratorRegistry.available_accelerators()
    family = [n for n in (("cuda", "mps") if name == "gpu" else (name,)) if n in known]
    if not family:
        raise ConfigError(f"trainer.accelerator={name} is not a Lightning accelerator: choose "
                          f"one of {sorted(known | {'auto', 'gpu'})}")
    acc = {n: AcceleratorRegistry[n]["accelerator"] for n in family}
    usable = [n for n in family if acc[n].is_available()]
    if not usable:
        which = " and ".join(acc[n].__name__ for n in family)
        raise ConfigError(f"trainer.accelerator={name}: this machine has no {name} device "
                          f"(Lightning: {which} not available); use trainer.accelerator=cpu, or run "
                          "where the device and its driver are visible (CUDA_VISIBLE_DEVICES "
                          "etc.)")
    devices = trainer.get("devices", "auto")
    count = acc[usable[0]].auto_device_count()
    if usable[0] != "cpu" and isinstance(devices, int) and devices > count:
        raise ConfigError(f"trainer.devices={devices} is more than the {count} {usable[0]} "
                          f"device(s) this machine shows; lower trainer.devices (per node) or "
                          "check the visible-device variables")
