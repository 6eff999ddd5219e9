"""Reading results: comparisons, measured against simulated, attribution of lost time, critical paths, replays."""
