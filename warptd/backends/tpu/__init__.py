"""Google Cloud TPUs: chips from the PCI devices under ``--sysfs``, usage from the libtpu runtime, and
the device nodes their processes open."""

from warptd.backends.vendor import Accelerator, NodeRule, Vendor

VENDOR = Vendor(
    accelerators=(
        Accelerator(
            "tpu",
            "warptd.backends.tpu.backend:TpuBackend",
            # tpu-info's get_chip_owners: /dev/accelN (v2-v4, class accel) or /dev/vfio/<group> (v5e on).
            device_nodes=NodeRule(
                ("accel", "vfio-dev"), r"accel\d+|vfio/devices/vfio\d+", vfio_group=True, whole_slot=True
            ),
        ),
    ),
)
