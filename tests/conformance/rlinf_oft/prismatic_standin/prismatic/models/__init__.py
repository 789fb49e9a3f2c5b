"""Stand-in for openvla-oft's prismatic package (see tests/conformance/rlinf_oft/test_rlinf_oft.py)."""
