"""openvla_oft."""
