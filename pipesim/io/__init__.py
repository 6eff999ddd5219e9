"""Files in and out: schedule and timeline JSON, cost files, torch CSV and order, Chrome traces, Kineto traces."""

from __future__ import annotations

from pipesim._face import lazy_exports

# The package's face (docs/design.md, "The app through pipesim's faces"): each name and the module defining it,
# loaded on first use.
FACE = {
    "read_bytes": "pipesim.io.bounded",
    "read_tail": "pipesim.io.bounded",
    "cost_file_from_bytes": "pipesim.io.cost_file",
    "cost_from_dict": "pipesim.io.cost_file",
    "load_cost": "pipesim.io.cost_file",
    "CsvError": "pipesim.io.formats",
    "parse_bounded_json": "pipesim.io.formats",
    "schedule_to_csv": "pipesim.io.formats",
    "schedule_from_csv": "pipesim.io.formats",
    "timeline_to_dict": "pipesim.io.formats",
    "write_json": "pipesim.io.formats",
    "ImportedRun": "pipesim.io.kineto",
    "import_trace_data": "pipesim.io.kineto",
    "parse_trace": "pipesim.io.kineto",
    "run_trace": "pipesim.io.chrome_trace",
    "timeline_to_chrome_trace": "pipesim.io.chrome_trace",
    "dialect_note": "pipesim.io.torch_csv",
}
__all__ = sorted(FACE)
__getattr__ = lazy_exports(__name__, FACE)
