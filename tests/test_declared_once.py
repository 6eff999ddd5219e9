"""Things declared once (issue 32 item 5): a copy that drifts from its original fails here."""

from __future__ import annotations

from dataclasses import fields

from pipesim.io.run_record import RunOutputs
from pipesim_executor.host import run_folder
from pipesim_executor.host.run_folder import RunResult


def test_a_run_result_carries_every_output_the_reader_reads(tmp_path, monkeypatch):
    """RunResult extends RunOutputs and copies every field: an output added to RunOutputs cannot be dropped."""
    sentinels = {output.name: object() for output in fields(RunOutputs)}
    monkeypatch.setattr(run_folder, "read_outputs", lambda run_dir: RunOutputs(**sentinels))
    result = RunResult(tmp_path, "ok", "", None, None, measured_step_ms=1.0)  # no median of the sentinels
    run_folder._load_outputs(result)
    assert {name: getattr(result, name) for name in sentinels} == sentinels
