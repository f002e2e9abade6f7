"""The shared language of client, server and runner: pydantic models and pure functions, no I/O."""
