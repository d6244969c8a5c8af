"""Who is using the accelerator: compute processes per device and the pod/container they run in."""
