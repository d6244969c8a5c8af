"""The HTTP API: an asyncio server (h11 for the protocol) that reads every connection on one thread
and runs routes in a bounded pool; /metrics only reads the rendered snapshot."""
