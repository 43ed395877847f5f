"""asyncio listeners and connection lifecycle: nothing else."""
