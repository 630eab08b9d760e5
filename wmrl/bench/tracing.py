"""Tracing overhead: microseconds per span (enabled / disabled, context manager and decorated
function, sync and in an asyncio task), plus the flush, and the fraction of a realistic step
(1000 spans per 1 s step, flushed once) that tracing costs (target < 1 %)."""

from __future__ import annotations

import asyncio
import time

from wmrl.measure.tracing import Tracer

N = 100_000


def _per_call_us(fn, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, time.perf_counter_ns() - t0)
    return best / n / 1000


def _empty(n):
    for _ in range(n):
        pass


def _spans(n):
    for i in range(n):
        with Tracer.trace_span("s", i=i):
            pass


@Tracer.trace_func
def _f():
    return None


def _funcs(n):
    for _ in range(n):
        _f()


def _async_spans(n):
    async def main():
        for i in range(n):
            with Tracer.trace_span("s", i=i):
                pass

    asyncio.run(main())


def run(spans_per_step: int = 1000, step_s: float = 1.0, n: int = N) -> list[dict]:
    """Per-span costs over ``n`` calls (best of 3); one step of ``spans_per_step`` spans."""
    was = Tracer.enabled()
    try:
        base = _per_call_us(_empty, n)
        Tracer.configure(enabled=False)
        off = _per_call_us(_spans, n) - base
        off_fn = _per_call_us(_funcs, n) - base
        Tracer.configure(enabled=True, process_name="bench")
        Tracer.flush()
        on = _per_call_us(_spans, n) - base
        Tracer.flush()
        on_fn = _per_call_us(_funcs, n) - base
        Tracer.flush()
        on_async = _per_call_us(_async_spans, max(1, n // 4)) - base
        Tracer.flush()
        t0 = time.perf_counter_ns()  # one realistic step: spans then the per-step flush
        _spans(spans_per_step)
        events = Tracer.flush()
        step_us = (time.perf_counter_ns() - t0) / 1000
    finally:
        Tracer.configure(enabled=was)
    frac = step_us / (step_s * 1e6)
    return [
        {"name": "tracing.span_us", "value": round(on, 3), "unit": "us/span", "enabled": True},
        {"name": "tracing.func_us", "value": round(on_fn, 3), "unit": "us/call",
         "enabled": True},
        {"name": "tracing.async_span_us", "value": round(on_async, 3), "unit": "us/span",
         "enabled": True, "what": "span inside an asyncio task (lane bookkeeping)"},
        {"name": "tracing.disabled_span_us", "value": round(off, 3), "unit": "us/span"},
        {"name": "tracing.disabled_func_us", "value": round(off_fn, 3), "unit": "us/call"},
        {"name": "tracing.step_overhead_fraction", "value": round(frac, 5), "unit": "fraction",
         "spans_per_step": spans_per_step, "step_s": step_s,
         "flushed_events": len(events), "step_tracing_us": round(step_us, 1)},
    ]


if __name__ == "__main__":
    import json

    for row in run():
        print(json.dumps(row))
