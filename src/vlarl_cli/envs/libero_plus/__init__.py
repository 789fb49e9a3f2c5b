"""LIBERO-Plus: 10,030 single-episode tasks over seven perturbation dimensions of LIBERO's four suites."""
