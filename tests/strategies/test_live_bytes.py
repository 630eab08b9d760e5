"""``strategies.live_bytes.LiveBytes``: storages counted while any tensor on them lives."""

import torch

from strategies.live_bytes import LiveBytes


def test_live_bytes_counts_storages_until_the_last_view_dies():
    with torch.no_grad(), LiveBytes() as live:
        a = torch.zeros(1000, device="meta")
        view = a[:10]
        del a
        assert live.live == 4000  # the view keeps the storage
        b = torch.zeros(250, device="meta")
        assert live.peak == live.live == 5000
        del view, b
        assert live.live == 0 and live.peak == 5000
