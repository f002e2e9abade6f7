"""StarForge: submit and run LLM post-training jobs."""

# The release, as in pyproject.toml (tests/test_release.py keeps the two in step). A literal, not
# importlib.metadata: an editable install's metadata keeps the version it was installed with, and
# every `sf` command would pay for reading it.
__version__ = "0.3.0"
