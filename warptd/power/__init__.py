"""Power backends: continuous power by domain and energy counters."""
