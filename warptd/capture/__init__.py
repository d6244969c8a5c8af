"""``warptd capture``: what a node's NVML answers warptd, recorded into one file that the NVML double
replays (:mod:`warptd.capture.schema`, docs/captures.md)."""
