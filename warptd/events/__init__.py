"""Device events that arrive on their own schedule (NVIDIA XIDs), kept apart from sampling."""
