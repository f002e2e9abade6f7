"""The one HTTP client of StarForge (used by the CLI, the runner and the report SDK).

It stays light (httpx + pydantic + stdlib) because it runs inside training images.
"""
