"""The HTTP API: a tiny router on the standard library's threading HTTP server."""
