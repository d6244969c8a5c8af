"""Intel Gaudi (Habana) accelerators through HLML (pyhlml): one device object per AIP, their power and
energy as the ``hlml`` power backend, and the device nodes their processes open."""

from warptd.backends.vendor import Accelerator, NodeRule, Power, Vendor

VENDOR = Vendor(
    accelerators=(
        Accelerator(
            "gaudi",
            "warptd.backends.gaudi.backend:GaudiBackend",
            # habanalabs: /dev/accel/accelN (accel subsystem) or /dev/hlN (before it); the accel_controlDN
            # and hl_controlDN nodes are for monitoring (hl-smi, HLML) and hold no compute context.
            device_nodes=NodeRule(("accel", "habanalabs"), r"accel/accel\d+|hl\d+"),
        ),
    ),
    power=(Power("hlml", companion="gaudi"),),
    rank=30,
)
