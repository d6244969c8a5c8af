"""Stress workloads, run in a child process while the daemon's samplers record the device.

Nothing in this package imports torch at module level: the daemon lists and validates tests
without it, and only the spawned worker process loads torch.
"""
