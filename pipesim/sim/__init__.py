"""Simulation: the engine, shared CPU cores, the data-parallel reduction, step times, metrics and memory."""
