"""logging."""
