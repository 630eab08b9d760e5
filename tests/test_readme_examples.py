"""The README's "## Extend it" examples run and keep the contracts of ``wmrl/interfaces.py``.

The ```python blocks of that section are written, as the README says, to one module
``my_ext.py``; each class is then driven through its contract, and the README's Hydra
overrides (its ```bash blocks) are composed against ``conf/`` and built the way
``wmrl.fit`` builds them. Any edit that breaks an example breaks this test. Also: every
``](docs/...)`` link of the README names a file that exists.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf
from toys import assert_reward_contract

import wmrl.config  # noqa: F401  registers the ${wmrl_assets:} resolver of conf/
from wmrl.interfaces import ChunkEnv, Policy, PolicySample

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MODULE = "my_ext"


def _section() -> str:
    text = README.read_text()
    m = re.search(r"^## Extend it\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, "README.md has no '## Extend it' section"
    return m.group(1)


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", _section(), re.S | re.M)


def _fit_commands() -> list[list[str]]:
    """The arguments after ``scripts/fit.py`` of every command in the section's bash blocks."""
    cmds = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if "scripts/fit.py" in words:
                cmds.append(words[words.index("scripts/fit.py") + 1:])
    return cmds


@pytest.fixture(scope="module")
def ext(tmp_path_factory):
    code = _blocks("python")
    assert len(code) == 3, f"expected 3 python examples (reward, env, policy), got {len(code)}"
    d = tmp_path_factory.mktemp("readme_ext")
    path = d / f"{MODULE}.py"
    path.write_text("\n\n".join(code))
    spec = importlib.util.spec_from_file_location(MODULE, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = mod  # so that `_target_: my_ext.X` resolves
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(MODULE, None)


def _classes(ext):
    """(reward, env, policy) classes, named by the README's own overrides."""
    found = {}
    for args in _fit_commands():
        for a in args:
            m = re.match(r"\+(reward|env|policy)=\{_target_: *" + MODULE + r"\.(\w+)", a)
            if m:
                found[m.group(1)] = getattr(ext, m.group(2))
    assert set(found) == {"reward", "env", "policy"}, found
    return found["reward"], found["env"], found["policy"]


def _frames(b, c, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, c, h, w, 3), dtype=torch.uint8, generator=g)


def test_each_example_is_self_contained():
    for code in _blocks("python"):
        ns: dict = {"__name__": "readme_block"}
        exec(compile(code, "<README example>", "exec"), ns)  # its own imports suffice
        assert any(isinstance(v, type) and v.__module__ == "readme_block" for v in ns.values())


def test_reward_contract(ext):
    reward_cls, _, _ = _classes(ext)
    reward = reward_cls()
    for h, w in [(16, 16), (64, 64), (32, 48)]:  # toy, tabletop, non-square
        scores = assert_reward_contract(reward, ["a task"] * 3, chunk=8, height=h, width=w)
        assert scores.dtype == torch.float32
    # what the docstring says: closer red to green scores higher; red over all green is 1
    f = torch.full((1, 3, 16, 16, 3), 128, dtype=torch.uint8)
    red, green = torch.tensor([255, 0, 0], dtype=torch.uint8), torch.tensor([0, 255, 0],
                                                                             dtype=torch.uint8)
    f[0, :, 8, 8] = green
    f[0, 0, 0, 0], f[0, 1, 8, 9], f[0, 2, 8, 8] = red, red, red
    s = reward(f, ["t"])[0]
    assert s[0] < s[1] < s[2] and s[2] == 1.0
    assert reward(torch.full((1, 2, 8, 8, 3), 128, dtype=torch.uint8), ["t"]).eq(0).all()


def _toward_green(obs, chunk, action_dim):
    """A controller that reads the image: move the red pixel toward the green one."""
    img = obs["image"].int()
    r, g, b = img.unbind(-1)
    red, green = (r - g.maximum(b)) > 60, (g - r.maximum(b)) > 60
    out = torch.zeros(img.shape[0], chunk, action_dim)
    for i in range(img.shape[0]):
        if green[i].any() and red[i].any():
            d = green[i].nonzero()[0].float() - red[i].nonzero()[0].float()
            out[i, :, :2] = d.sign()
    return out


def test_env_contract(ext):
    reward_cls, env_cls, _ = _classes(ext)
    b, group, chunk, steps, dim = 8, 4, 8, 32, 7
    # the reward as fit hands it over: a `_target_` config (or an object)
    env = env_cls(num_envs=b, group_size=group, chunk=chunk, max_episode_steps=steps,
                  reward={"_target_": f"{MODULE}.{reward_cls.__name__}"})
    assert isinstance(env, ChunkEnv) and isinstance(env.reward, reward_cls)
    obs = env.reset(seed=0)
    assert obs["image"].dtype == torch.uint8 and obs["image"].shape[0] == b
    assert obs["image"].shape[-1] == 3 and obs["image"].dim() == 4
    assert isinstance(obs["task"], list) and len(obs["task"]) == b
    first = obs["image"].view(b // group, group, -1)
    assert bool((first == first[:, :1]).all()), "envs of a group must share the initial state"
    assert torch.equal(env.reset(seed=0)["image"], obs["image"])  # same seed, same starts

    g = torch.Generator().manual_seed(0)
    ever_term = torch.zeros(b, dtype=torch.long)
    for k in range(steps // chunk):
        actions = torch.rand(b, chunk, dim, generator=g) * 2 - 1
        obs, rewards, terms, truncs, info = env.chunk_step(actions)
        assert obs["image"].dtype == torch.uint8 and obs["image"].shape[0] == b
        assert len(obs["task"]) == b
        assert rewards.shape == (b, chunk) and rewards.is_floating_point()
        assert terms.shape == truncs.shape == (b, chunk)
        assert terms.dtype == truncs.dtype == torch.bool
        assert info["success"].shape == (b,) and info["success"].dtype == torch.bool
        ever_term += terms.sum(1)
        if k < steps // chunk - 1:
            assert not truncs.any()
    assert bool((ever_term <= 1).all()), "an env terminates at most once per episode"
    assert torch.equal(ever_term.bool(), info["success"])
    assert bool((info["success"] | truncs[:, -1]).all()), "every episode ends by max_episode_steps"

    # an image-reading controller reaches every goal: the frames and the reward agree
    obs = env.reset(seed=1)
    for _ in range(steps // chunk):
        obs, rewards, terms, truncs, info = env.chunk_step(_toward_green(obs, chunk, dim))
    assert bool(info["success"].all()), info["success"]


def test_policy_contract(ext):
    _, _, policy_cls = _classes(ext)
    policy = policy_cls()
    assert isinstance(policy, torch.nn.Module) and isinstance(policy, Policy)
    c, d = policy.chunk, policy.action_dim
    for h in (16, 64):  # DotWorld's frames and the tabletop world model's
        obs = {"image": _frames(4, 1, h, h, seed=h)[:, 0], "task": ["t"] * 4}
        with torch.no_grad():  # as the rollout actor samples
            s = policy.sample(obs, 1.0, torch.Generator().manual_seed(3))
        assert isinstance(s, PolicySample)
        assert s.tokens.shape == (4, c * d) and s.tokens.dtype == torch.long
        assert bool((s.tokens >= 0).all())
        assert s.actions.shape == (4, c, d) and s.actions.is_floating_point()
        assert bool((s.actions.abs() <= 1).all())
        assert s.logprobs.shape == (4, c * d) and bool((s.logprobs <= 0).all())
        again = policy.sample(obs, 1.0, torch.Generator().manual_seed(3))
        assert torch.equal(again.tokens, s.tokens), "same generator seed, same sample"

        for temperature in (1.0, 1.6):
            with torch.no_grad():
                s = policy.sample(obs, temperature, torch.Generator().manual_seed(5))
            lp, ent = policy.log_probs(obs, s.tokens, temperature, return_entropy=True)
            torch.testing.assert_close(lp, s.logprobs, rtol=1e-5, atol=1e-5)
            assert ent.shape == (4, c * d) and bool((ent >= 0).all())
            assert torch.equal(policy.log_probs(obs, s.tokens, temperature), lp)

    # the trainer differentiates log_probs; a state_dict sync reproduces them elsewhere
    policy.zero_grad()
    policy.log_probs(obs, s.tokens, 1.0).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.parameters())
    copy = policy_cls()
    copy.load_state_dict(policy.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(copy.log_probs(obs, s.tokens, 1.0),
                                   policy.log_probs(obs, s.tokens, 1.0), rtol=0, atol=0)


def test_readme_overrides_select_the_examples(ext):
    """Compose every README fit command against conf/ and build what it selects, as
    ``wmrl.fit.build_datamodule`` and the rollout actors do."""
    reward_cls, env_cls, policy_cls = _classes(ext)
    cmds = _fit_commands()
    assert len(cmds) == 3, cmds
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for args in cmds:
            cfg = compose("fit", overrides=args)
            r = cfg.rollout
            policy = instantiate(OmegaConf.to_container(cfg.policy, resolve=True),
                                 _convert_="all")
            reward_spec = OmegaConf.to_container(cfg.reward, resolve=True)
            targets = {cfg.policy._target_, cfg.reward._target_, cfg.env._target_}
            assert any(t.startswith(MODULE + ".") for t in targets), args
            if cfg.reward._target_.startswith(MODULE + "."):
                assert isinstance(instantiate(reward_spec, _convert_="all"), reward_cls)
                # the default world model hands its frames to this reward too
                assert cfg.env.reward._target_ == cfg.reward._target_
            if cfg.policy._target_.startswith(MODULE + "."):
                assert isinstance(policy, policy_cls)
                assert (policy.chunk, policy.action_dim) == (r.chunk, 7)
            if cfg.env._target_.startswith(MODULE + "."):
                env_spec = OmegaConf.to_container(cfg.env, resolve=True)
                env_spec["reward"] = reward_spec
                env = instantiate(env_spec, _convert_="all",
                                  num_envs=r.num_envs // r.num_env_workers,
                                  group_size=r.group_size, chunk=r.chunk,
                                  max_episode_steps=r.max_episode_steps)
                assert isinstance(env, env_cls) and isinstance(env.reward, reward_cls)
                obs = env.reset(seed=0)
                pol = policy_cls(chunk=r.chunk)
                with torch.no_grad():
                    s = pol.sample(obs, r.temperature, torch.Generator().manual_seed(0))
                _, rewards, *_ = env.chunk_step(s.actions)
                assert rewards.shape == (env.num_envs, r.chunk)
    GlobalHydra.instance().clear()


def test_readme_doc_links_exist():
    text = README.read_text()
    links = re.findall(r"\]\(((?:docs|strategies)/[^)#\s]+)(?:#[^)]*)?\)", text)
    assert links, "README links no docs"
    missing = [p for p in links if not (ROOT / p).exists()]
    assert not missing, missing
