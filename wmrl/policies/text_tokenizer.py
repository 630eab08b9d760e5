"""Prompt tokenisation for OpenVLA(-OFT).

Real checkpoints ship Llama-2's tokenizer (tokenizer.json / tokenizer.model), loaded with
``AutoTokenizer`` from the local directory. Tests use a tiny word-level tokenizer built offline
with the ``tokenizers`` library and saved in the same place; it keeps Llama's special ids
(0 unk, 1 BOS, 2 EOS) and fills the top of its base vocabulary with unused tokens that play the
role of the action tokens.
"""

from __future__ import annotations

import torch

PROMPT = "In: What action should the robot take to {task}?\nOut:"

TINY_CORPUS = (
    "In: What action should the robot take to pick up the black bowl and place it on the plate?"
    " Out: put the cream cheese in the bowl open the top drawer of the cabinet turn on the stove"
    " push the plate to the front of the stove put the bowl on top of the cabinet between next"
    " alphabet soup tomato sauce ketchup basket wine bottle rack butter milk orange juice box"
    " salad dressing bbq close middle left right microwave mug caddy book back white yellow red"
    " chocolate pudding frying pan moka pots both set shelf stack bowls wooden tray of a an"
)


def build_tiny_tokenizer(vocab_base: int = 512, empty_token: str = "\u2581"):
    """Word-level PreTrainedTokenizerFast with ``vocab_base`` ids; BOS prepended on encode."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", empty_token]
    words = sorted({w for w in TINY_CORPUS.replace("?", " ? ").replace(":", " : ").split()})
    words += ["?", ":"]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(specials + words))}
    if len(vocab) > vocab_base - 256:
        raise ValueError(f"vocab_base {vocab_base} too small for {len(vocab)} words + 256 actions")
    for i in range(len(vocab), vocab_base):
        vocab[f"<extra_{i}>"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation()]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="<unk>",
    )


def load_tokenizer(path: str):
    import os

    from transformers import AutoTokenizer

    if not any(os.path.isfile(os.path.join(path, f))
               for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        raise FileNotFoundError(f"no tokenizer files (tokenizer.json / tokenizer.model) in {path}: "
                                "copy the checkpoint's tokenizer into that directory")
    # the tokenizer class named in tokenizer_config.json, loaded directly: AutoTokenizer would
    # also read config.json, whose model_type "openvla" transformers does not know (it warns)
    cfg_file = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(cfg_file):
        import json

        import transformers

        with open(cfg_file) as f:
            name = json.load(f).get("tokenizer_class")
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        if cls is None and isinstance(name, str) and not name.endswith("Fast"):
            cls = getattr(transformers, name + "Fast", None)
        if cls is not None:
            return cls.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path, trust_remote_code=False)


class PromptEncoder:
    """task strings -> left-padded ids [B, T] + bool mask, ending in ``empty_token_id``.

    OpenVLA's prompt is ``"In: What action should the robot take to {task.lower()}?\\nOut:"``
    followed by the empty token (Llama id 29871) that its training data put after ``Out:``.
    Encodings are cached per distinct task (tasks repeat across rollout steps)."""

    def __init__(self, tokenizer, empty_token_id: int, max_cache: int = 4096):
        self.tokenizer = tokenizer
        self.empty_token_id = int(empty_token_id)
        self.max_cache = max_cache
        self._cache: dict[str, list[int]] = {}

    def encode_one(self, task: str) -> list[int]:
        ids = self._cache.get(task)
        if ids is None:
            ids = list(self.tokenizer(PROMPT.format(task=task.lower()))["input_ids"])
            if ids[-1] != self.empty_token_id:
                ids.append(self.empty_token_id)
            if len(self._cache) < self.max_cache:
                self._cache[task] = ids
        return ids

    def __call__(self, tasks: list[str], device=None) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = [self.encode_one(t) for t in tasks]
        n = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), n, dtype=torch.long)
        mask = torch.zeros(len(seqs), n, dtype=torch.bool)
        for i, s in enumerate(seqs):
            ids[i, n - len(s) :] = torch.tensor(s)
            mask[i, n - len(s) :] = True
        return ids.to(device), mask.to(device)
