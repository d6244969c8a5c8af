"""Accelerator backends, one module per vendor, loaded together by :mod:`warptd.registry`."""
