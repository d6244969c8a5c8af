"""Tenstorrent Wormhole and Blackhole chips through pyluwen, the library behind tt-smi, and the device
nodes their processes open."""

from warptd.backends.vendor import Accelerator, NodeRule, Vendor

VENDOR = Vendor(
    accelerators=(
        Accelerator(
            "tenstorrent",
            "warptd.backends.tenstorrent.backend:TenstorrentBackend",
            # tt-kmd: class "tenstorrent", device "tenstorrent/%d"; an n300's second chip is reached
            # through the first one's node.
            device_nodes=NodeRule(("tenstorrent",), r"tenstorrent/\d+", board_key="board_id"),
        ),
    ),
    rank=40,
)
