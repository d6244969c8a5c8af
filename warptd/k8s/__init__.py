"""Kubernetes: which pod each device is allocated to (kubelet PodResources API) and its energy."""
