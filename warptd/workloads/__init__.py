"""Energy per workload on any node: Slurm jobs, systemd units, containers and users, found from the
processes on each device and their cgroups (``--workloads``)."""
