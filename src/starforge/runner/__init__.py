"""The job side: verify and unpack the package, build the environment, run the method, report.

Runs inside training images, so it imports only the stdlib, pydantic, httpx, the contract, the
catalog and the client.
"""
