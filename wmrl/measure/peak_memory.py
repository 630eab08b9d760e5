"""A phase's peak memory in this process, counted as ``make plan`` counts a role's.

On an accelerator: the caching allocator's peak of allocated bytes
(``torch.accelerator.max_memory_allocated``), reset at the phase's start. On a CPU: the resident
set's high-water mark (``VmHWM``, reset by writing 5 to ``/proc/self/clear_refs``) less the
resident set before any model was built (the interpreter and its libraries): what the models
and their working sets added. ``VmHWM``, not ``ru_maxrss``: the latter survives ``execve`` and
carries the parent's RSS at fork.
"""

from __future__ import annotations

import re

import torch


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+) kB", f.read()).group(1))


def host_rss() -> int:
    """This process's resident set now (bytes)."""
    return _status_kb("VmRSS") * 1024


def host_peak() -> int:
    """This process's resident-set high-water mark (bytes) since it started or was reset."""
    return _status_kb("VmHWM") * 1024


def reset_host_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class PeakMemory:
    """``PeakMemory(device)`` before any model is built (the host baseline), ``reset()`` when
    the phase starts, ``peak()`` when it ends: bytes."""

    def __init__(self, device: str | torch.device):
        self.device = torch.device(device)
        self.baseline = host_rss() if self.device.type == "cpu" else 0

    def reset(self) -> None:
        if self.device.type == "cpu":
            reset_host_peak()
        else:
            torch.accelerator.synchronize(self.device)
            torch.accelerator.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        if self.device.type == "cpu":
            return host_peak() - self.baseline
        torch.accelerator.synchronize(self.device)
        return int(torch.accelerator.max_memory_allocated(self.device))
