"""warptd: vendor-agnostic accelerator telemetry daemon."""

__version__ = "0.1.0"
