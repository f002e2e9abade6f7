"""StarForge: submit and run LLM post-training jobs."""

__version__ = "0.1.0"
