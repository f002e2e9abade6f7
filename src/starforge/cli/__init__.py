"""The ``sf`` command line: typer commands over the project layer and the HTTP client."""
