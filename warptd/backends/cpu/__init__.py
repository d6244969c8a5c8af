"""The host CPU through psutil, hwmon and cpufreq (every Linux box, accelerator or not), and its
package power through RAPL."""

from warptd.backends.vendor import Accelerator, Power, Vendor

VENDOR = Vendor(
    accelerators=(Accelerator("cpu", "warptd.backends.cpu.backend:CpuBackend"),),
    power=(Power("rapl", companion="cpu", target="warptd.power.rapl:RaplPowerBackend"),),
    rank=90,  # the host, after the accelerators
)
