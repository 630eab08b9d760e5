"""Tracing: spans nest, async tasks get their own lanes, the switch works, and a real
trainer + env + rollout (Ray actors) run merges into one valid Chrome trace."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from wmrl.measure.tracing import Tracer


@pytest.fixture
def tracer():
    Tracer.configure(enabled=True, process_name="trainer")
    Tracer.flush()
    yield Tracer
    Tracer.configure(enabled=False)
    Tracer.flush()


def spans(events):
    return [e for e in events if e["ph"] == "X"]


def end(e) -> float:
    return e["ts"] + e["dur"]


def encloses(outer, inner) -> bool:
    return outer["ts"] <= inner["ts"] and end(inner) <= end(outer)


def assert_tracks_nest(events):
    """On every (pid, tid) track any two spans are disjoint or one contains the other."""
    tracks: dict = {}
    for e in spans(events):
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for evs in tracks.values():
        stack: list = []
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and end(stack[-1]) <= e["ts"]:
                stack.pop()
            assert not stack or end(e) <= end(stack[-1]), f"{e['name']} crosses {stack[-1]}"
            stack.append(e)


def by_name(events, name):
    return [e for e in spans(events) if e["name"] == name]


def test_nested_spans_and_decorated_function(tracer):
    @tracer.trace_func
    def inner(x):
        time.sleep(0.002)
        return x + 1

    with tracer.trace_span("step", step=7):
        with tracer.trace_span("rollout"):
            assert inner(1) == 2
        with pytest.raises(ValueError):
            with tracer.trace_span("update"):
                raise ValueError("boom")
    ev = tracer.flush()
    step, rollout, update = by_name(ev, "step")[0], by_name(ev, "rollout")[0], by_name(ev, "update")[0]
    fn = [e for e in spans(ev) if e["name"].endswith("inner")][0]
    assert step["args"] == {"step": 7} and update["args"] == {"error": "ValueError"}
    assert encloses(step, rollout) and encloses(rollout, fn) and encloses(step, update)
    assert end(rollout) <= update["ts"] and fn["dur"] >= 2000  # microseconds
    assert len({(e["pid"], e["tid"]) for e in spans(ev)}) == 1
    names = {e["name"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["tid"] == 0}
    assert names == {"process_name": "trainer"}
    assert tracer.flush() == []  # flushed events are gone


def test_concurrent_async_tasks_get_their_own_lanes(tracer):
    @tracer.trace_func(name="chunk")
    async def chunk(delay):
        with tracer.trace_span("denoise"):
            await asyncio.sleep(delay)
        return delay

    async def main():
        return await asyncio.gather(chunk(0.02), chunk(0.01), chunk(0.015))

    assert asyncio.run(main()) == [0.02, 0.01, 0.015]
    ev = tracer.flush()
    chunks = by_name(ev, "chunk")
    assert len(chunks) == 3 and len({e["tid"] for e in chunks}) == 3  # overlapping: 3 lanes
    assert_tracks_nest(ev)
    for c in chunks:
        assert any(d["tid"] == c["tid"] and encloses(c, d) for d in by_name(ev, "denoise"))
    lanes = {e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert lanes == {"MainThread async-1", "MainThread async-2", "MainThread async-3"}


def test_disabled_records_nothing(tracer):
    Tracer.configure(enabled=False)

    @Tracer.trace_func
    async def f():
        return 3

    with Tracer.trace_span("ignored"):
        assert asyncio.run(f()) == 3
    assert Tracer.flush() == []


class Env:
    def __init__(self):
        Tracer.configure(enabled=True, process_name="env")

    @Tracer.trace_func(name="env.chunk_step")
    def chunk_step(self, n):
        for i in range(n):
            with Tracer.trace_span("wm.denoise", i=i):
                time.sleep(0.001)
        return n

    def flush(self):
        return Tracer.flush()


class Rollout:
    def __init__(self):
        Tracer.configure(enabled=True, process_name="rollout")

    @Tracer.trace_func(name="rollout.sample")
    async def sample(self, delay):
        with Tracer.trace_span("policy.forward"):
            await asyncio.sleep(delay)
        return delay

    def dump(self, run_dir):
        return str(Tracer.dump(run_dir))


@pytest.mark.slow
def test_trainer_env_rollout_merge_into_one_chrome_trace(tracer, ray_local, tmp_path):
    ray = ray_local
    env = ray.remote(num_cpus=0)(Env).remote()
    rollout = ray.remote(num_cpus=0, max_concurrency=4)(Rollout).remote()
    trainer_events = []
    for step in range(2):
        with tracer.trace_span("train_step", step=step):
            with tracer.trace_span("rollout"):
                assert ray.get([env.chunk_step.remote(3), rollout.sample.remote(0.01),
                                rollout.sample.remote(0.02)]) == [3, 0.01, 0.02]
            with tracer.trace_span("update"):
                time.sleep(0.005)
        trainer_events += tracer.flush()  # once per step, as a driver would
    env_events = ray.get(env.flush.remote())
    assert ray.get(rollout.dump.remote(str(tmp_path / "run"))).endswith(".jsonl")
    out = Tracer.merge([trainer_events, env_events, tmp_path / "run"], tmp_path / "trace.json")
    with open(out) as f:
        trace = json.load(f)
    ev = trace["traceEvents"]
    procs = {e["args"]["name"]: e["pid"] for e in ev if e["name"] == "process_name"}
    assert set(procs) == {"trainer", "env", "rollout"} and len(set(procs.values())) == 3
    assert all(e["ph"] in ("X", "M") for e in ev)
    assert all({"ts", "dur", "pid", "tid", "name"} <= e.keys() for e in spans(ev))
    threads = {(e["pid"], e["tid"]) for e in ev if e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in spans(ev)} <= threads
    assert_tracks_nest(ev)
    assert [e["ts"] for e in spans(ev)] == sorted(e["ts"] for e in spans(ev))

    steps, rollouts, updates = (by_name(ev, n) for n in ("train_step", "rollout", "update"))
    chunks, samples = by_name(ev, "env.chunk_step"), by_name(ev, "rollout.sample")
    assert len(steps) == len(rollouts) == len(chunks) == 2 and len(samples) == 4
    assert {e["pid"] for e in chunks} == {procs["env"]}
    assert {e["pid"] for e in samples} == {procs["rollout"]}
    for s, r, u in zip(steps, rollouts, updates):
        assert s["pid"] == procs["trainer"] and encloses(s, r) and encloses(s, u)
        assert end(r) <= u["ts"]  # the update starts after the rollout returned
        remote = [e for e in chunks + samples if encloses(r, e)]
        assert len(remote) == 3  # the trainer span encloses the remote calls it waited on
    for c in chunks:  # 3 denoise spans nested in each env step, in order
        ds = [d for d in by_name(ev, "wm.denoise") if encloses(c, d)]
        assert [d["args"]["i"] for d in ds] == [0, 1, 2] and ds[0]["tid"] == c["tid"]
    for s in samples:
        assert any(encloses(s, f) and f["tid"] == s["tid"] for f in by_name(ev, "policy.forward"))
    ray.kill(env)
    ray.kill(rollout)
