"""Prometheus exposition of the snapshot."""
