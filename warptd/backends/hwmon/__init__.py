"""GPUs without an SDK, through the kernel's DRM and hwmon sysfs (amdgpu, Intel i915 and xe): a fallback
that releases every card an SDK backend serves, and the DRM nodes their processes open."""

from warptd.backends.vendor import Accelerator, NodeRule, Vendor

VENDOR = Vendor(
    accelerators=(
        Accelerator(
            "hwmon",
            "warptd.backends.hwmon.backend:HwmonBackend",
            # DRM GPUs served through sysfs (amdgpu, i915, xe): the primary and render nodes.
            device_nodes=NodeRule(("drm",), r"dri/card\d+|dri/renderD\d+", fdinfo=True),
        ),
    ),
    rank=80,  # a fallback: after the SDK backends
)
