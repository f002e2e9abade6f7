"""HTTP API under ``/api/v1``: thin routers that parse, authenticate and call one service."""
