"""TOPReward on a tiny random Qwen3-VL saved in the upstream layout (no download)."""

from __future__ import annotations

import importlib.util
import pickle
import shutil

import pytest
import torch
from toys import assert_reward_contract

from wmrl.rewards.topreward import PROMPT, TOPReward, save_tiny_qwen3vl

TASKS = ["put the bowl on the plate", "turn on the stove"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_qwen3vl(tmp_path_factory.mktemp("qwen3vl"))


def chunk(b=2, c=8, size=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, c, size, size, 3), dtype=torch.uint8, generator=g)


def test_score_is_log_softmax_of_true_logit_by_hand(tiny_dir):
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration

    reward = TOPReward(str(tiny_dir), threshold=0.0)
    assert_reward_contract(reward, TASKS, height=64)
    reward.reset()  # the contract check's frames leave no history behind
    f = chunk()
    scores = reward(f, TASKS)
    assert scores.shape == (2, 8) and torch.equal(scores, torch.ones(2, 8))  # p >= 0

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    true_id = tok.convert_tokens_to_ids("ĠTrue")  # byte-level BPE: Ġ is the space
    assert reward.true_id == true_id
    inputs = reward.build_inputs([f[0]], TASKS[:1])
    # all 8 frames are used: 4 temporal patches of (64/16)^2 = 16 patches, 4 tokens each
    assert inputs["video_grid_thw"].tolist() == [[4, 4, 4]]
    assert int((inputs["input_ids"] == tok.convert_tokens_to_ids("<|video_pad|>")).sum()) == 16
    text = tok.decode(inputs["input_ids"][0])
    # frame pairs (0,1) (2,3) (4,5) (6,7) at 20 fps -> mean times .025 .125 .225 .325 s
    assert text.startswith("<0.0 seconds><|vision_start|><|video_pad|>")
    assert [f"<0.{i} seconds>" in text for i in range(4)] == [True] * 4
    assert text.endswith("<|vision_end|>" + PROMPT.format(task=TASKS[0]))
    # first patch = channels x (frames 0, 1) x rows 0-15 x cols 0-15, normalised to [-1, 1]
    hand = (f[0, :2, :16, :16].permute(3, 0, 1, 2).float() / 255 - 0.5) / 0.5
    torch.testing.assert_close(inputs["pixel_values_videos"][0], hand.flatten())

    model = Qwen3VLForConditionalGeneration.from_pretrained(str(tiny_dir)).eval()
    with torch.no_grad():
        logits = model(**inputs).logits[0]
    assert inputs["input_ids"][0, -1] == true_id
    by_hand = torch.log_softmax(logits[-2], dim=-1)[true_id]
    torch.testing.assert_close(reward.last_logprob[0], by_hand)


def test_batched_left_padded_forward_matches_single_env_and_history(tiny_dir):
    reward = TOPReward(str(tiny_dir), window=16)
    f1, f2, f3 = chunk(seed=1), chunk(seed=2), chunk(seed=3)
    reward(f1, TASKS)
    reward.reset(env_ids=[1])  # env 1 restarts: its next window holds only the new chunk
    reward(f2, TASKS)
    assert torch.equal(reward.history[0], torch.cat([f1[0], f2[0]]))
    assert torch.equal(reward.history[1], f2[1])
    batched = reward.last_logprob.clone()

    solo0 = TOPReward(str(tiny_dir))
    solo0(torch.cat([f1[:1], f2[:1]], dim=1), TASKS[:1])  # one 16-frame chunk
    solo1 = TOPReward(str(tiny_dir))
    solo1(f2[1:], TASKS[1:])
    torch.testing.assert_close(batched, torch.cat([solo0.last_logprob, solo1.last_logprob]),
                               atol=1e-4, rtol=1e-4)
    reward(f3, TASKS)  # the window slides: the last 16 frames only
    assert torch.equal(reward.history[0], torch.cat([f2[0], f3[0]]))
    # scoring a subset of envs: row 0 is env 1, which extends env 1's own history
    reward(f1[:1], TASKS[1:], env_ids=[1])
    assert torch.equal(reward.history[1], torch.cat([f3[1], f1[0]]))
    assert torch.equal(reward.history[0], torch.cat([f2[0], f3[0]]))
    with pytest.raises(ValueError, match="distinct"):
        reward(f1, TASKS, env_ids=[0, 0])
    with pytest.raises(ValueError, match="changed shape"):
        reward(chunk(b=1, size=32), TASKS[:1])


def test_threshold_on_probability_and_soft_scores(tiny_dir):
    reward = TOPReward(str(tiny_dir), binary=False)
    f = chunk(seed=4)
    soft = reward(f, TASKS)
    p = reward.last_logprob.exp()
    torch.testing.assert_close(soft, p[:, None].expand(2, 8))
    assert bool((soft > 0).all() and (soft < 1).all())
    hard = TOPReward(str(tiny_dir), threshold=float(p.mean()))(f, TASKS)
    assert hard[:, 0].tolist() == [float(p[0] >= p.mean()), float(p[1] >= p.mean())]
    assert hard[:, 0].sum() == 1 and torch.equal(hard, hard[:, :1].expand(2, 8))


def test_pickle_and_bad_inputs(tiny_dir):
    reward = TOPReward(str(tiny_dir))
    f = chunk(b=1, seed=5)
    reward(f, TASKS[:1])
    clone = pickle.loads(pickle.dumps(reward))
    assert not clone.is_built
    clone.reset()
    clone(f, TASKS[:1])
    torch.testing.assert_close(clone.last_logprob, reward.last_logprob)
    reward.offload()
    reward.onload()
    with pytest.raises(ValueError, match="uint8"):
        reward(f.float(), TASKS[:1])
    with pytest.raises(ValueError, match="task strings"):
        reward(f, TASKS)
    with pytest.raises(ValueError, match="window"):
        TOPReward(str(tiny_dir), window=0)


def test_multi_token_answer_is_a_clear_error(tiny_dir, tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    other = tmp_path / "split_true"
    shutil.copytree(tiny_dir, other)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(["no such word here"], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|video_pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>").save_pretrained(other)
    with pytest.raises(ValueError, match="single token"):
        TOPReward(str(other))(chunk(b=1), TASKS[:1])


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                    reason="the HF Qwen3-VL video processor needs torchvision")
def test_matches_hf_processor_when_torchvision_is_available(tiny_dir):
    from transformers import AutoProcessor

    reward = TOPReward(str(tiny_dir))
    f = chunk(b=1, c=16, seed=6)[0]
    ours = reward.build_inputs([f], TASKS[:1])
    proc = AutoProcessor.from_pretrained(str(tiny_dir))
    theirs = proc(text=["<|video_pad|>" + PROMPT.format(task=TASKS[0])], videos=[f],
                  video_metadata=[{"fps": 20.0, "total_num_frames": 16,
                                   "frames_indices": list(range(16))}],
                  do_sample_frames=False, return_tensors="pt")
    assert torch.equal(ours["input_ids"], theirs["input_ids"])
    assert torch.equal(ours["video_grid_thw"], theirs["video_grid_thw"])
    torch.testing.assert_close(ours["pixel_values_videos"], theirs["pixel_values_videos"])
