"""The one place that knows about ranks and devices (DESIGN.md)."""
