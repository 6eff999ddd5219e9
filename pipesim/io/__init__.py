"""Files in and out: schedule and timeline JSON, cost files, torch CSV and order, Chrome traces, Kineto traces."""
