from prismatic.vla.constants import NormalizationType

__all__ = ["NormalizationType"]
