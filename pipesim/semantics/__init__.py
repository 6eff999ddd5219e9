"""What a schedule means: the lowering (dependencies, messages, liveness), validation, the dependency graph."""
