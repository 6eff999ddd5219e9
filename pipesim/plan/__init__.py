"""The planner: search over schedules, sizes and splits under a memory cap, and its report."""
