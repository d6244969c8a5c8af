"""Sampling: scheduled reads of every backend into an in-memory snapshot."""
