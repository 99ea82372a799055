"""Thin Hydra entry points. This is the only place that wires every layer together."""
