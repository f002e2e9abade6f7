"""Background loops (asyncio tasks started in the app's lifespan): scheduler and reconciler."""
