"""Recordings: the samplers' own samples of a set of devices and power domains between two instants,
summarised. Stress runs, energy windows and ``warptd profile`` all produce one."""
