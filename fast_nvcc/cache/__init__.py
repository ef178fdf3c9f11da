"""7. The per-step cache: keys from what a step reads, entries on disk, and the handlers that
answer a step from it."""
