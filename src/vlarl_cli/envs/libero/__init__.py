"""libero."""
