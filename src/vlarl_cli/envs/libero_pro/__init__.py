"""LIBERO-PRO: LIBERO's four 10-task suites under object, position, instruction and task perturbations."""
