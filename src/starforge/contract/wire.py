"""The HTTP API's fixed names (its path prefix and headers), with no import at all: the ``sf``
fast path (``cli/fastpath.py``) speaks the API without pydantic; ``contract.api`` re-exports
them beside its models."""

API_PREFIX = "/api/v1"
CLIENT_VERSION_HEADER = "X-StarForge-Client"
RUN_TOKEN_HEADER = "X-StarForge-Run-Token"
