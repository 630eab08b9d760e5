"""The world-model fine-tune bench (wmrl/bench/finetune.py) at its tiny size: every figure it
promises, with the context a reader of the JSON lines needs, and positive numbers (timings'
values are the machine's and not judged)."""

import math

import torch

from tests.bench.test_bench import TINY, check_figures
from wmrl.bench.finetune import PARTS, run


def test_finetune_bench_figures():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        figures = run(**TINY["finetune"])
    finally:
        torch.set_num_threads(threads)
    check_figures("finetune", figures)
    by_name = {f["name"]: f for f in figures}
    variants = ["full"] + [f"lora_r{r}" for r in TINY["finetune"]["ranks"]]
    expected = {"finetune.clip_stream_clips_per_s.native_32",
                "finetune.clip_stream_clips_per_s.resized_64_to_32",
                "finetune.clip_stream_headroom"}
    for v in variants:
        expected |= {f"finetune.step_s.{v}", f"finetune.trainable_params.{v}",
                     *(f"finetune.{p}_s.{v}" for p in PARTS)}
        if v != "full":
            expected |= {f"finetune.step_time_ratio.{v}_vs_full",
                         f"finetune.dit_time_ratio.{v}_vs_full"}
    assert set(by_name) == expected, sorted(set(by_name) ^ expected)

    for f in figures:
        assert f["value"] > 0 and math.isfinite(f["value"]), f
    for v in variants:
        step = by_name[f"finetune.step_s.{v}"]
        assert {"batch", "frames", "image", "steps", "warmup", "threads", "clips_per_s",
                *(f"{p}_s" for p in PARTS)} <= set(step), step
        assert step["frames"] == 13 and step["image"] == 32 and step["batch"] == 1
        assert all(step[f"{p}_s"] > 0 for p in PARTS), step
        params = by_name[f"finetune.trainable_params.{v}"]
        assert params["total_params"] >= params["value"] > 0, params
        assert params["action_module_params"] > 0, params  # trained in full with LoRA too
        assert (params["adapter_params"] > 0) == (v != "full"), params
        for p in PARTS:
            assert 0 < by_name[f"finetune.{p}_s.{v}"]["share_of_step"] < 1
    # LoRA trains the adapters and the action modules: fewer parameters than the whole DiT
    full = by_name["finetune.trainable_params.full"]["value"]
    assert all(by_name[f"finetune.trainable_params.{v}"]["value"] < full for v in variants[1:])
    stream = by_name["finetune.clip_stream_clips_per_s.native_32"]
    assert stream["batches_timed"] >= 1 and stream["clips_per_pass"] == 2
