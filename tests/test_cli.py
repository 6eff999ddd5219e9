"""`python -m pipesim`: commands, outputs and one-line errors (in-process, plus one real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipesim.charts import export
from pipesim.cli.main import main
from pipesim.cost.model import CostModel, RankRuntime
from pipesim.io.cost_file import save_cost
from pipesim.io.formats import load_schedule, schedule_to_csv
from pipesim.schedules import build_schedule, schedule_names
from pipesim.sim.metrics import compute_metrics
from pipesim.sim.simulate import simulate

REPO = Path(__file__).resolve().parents[1]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage_error(result, *needles: str) -> None:
    code, _, err = result
    assert code == 2
    assert err.startswith("python -m pipesim: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def _spans(doc):
    return {s["action"]: s for s in doc["spans"]}


def test_list_shows_names_summaries_and_options(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0
    for name in schedule_names():
        assert name in out
    interleaved = out[out.index("interleaved-1f1b") :]
    assert "options: num_virtual_stages" in interleaved.splitlines()[1]
    assert "splits backward" in out


def test_simulate_writes_json_csv_trace_and_html(capsys, tmp_path):
    code, out, err = run(
        capsys,
        "simulate",
        "--schedule",
        "1f1b",
        "--ranks",
        "3",
        "--microbatches",
        "4",
        "--f",
        "1",
        "--b",
        "2",
        "--comm",
        "0.5",
        "--json",
        str(tmp_path / "t.json"),
        "--csv",
        str(tmp_path / "s.csv"),
        "--trace",
        str(tmp_path / "trace.json"),
        "--html",
        str(tmp_path / "g.html"),
    )
    assert code == 0, err
    schedule = build_schedule("1f1b", 3, 4)
    cost = CostModel.uniform(1.0, 2.0, comm_ms=0.5)
    metrics = compute_metrics(simulate(schedule, cost), cost)
    assert f"makespan {metrics.makespan:.3f} ms" in out
    assert f"bubble_fraction {metrics.bubble_fraction:.1%}" in out
    assert "rank 2: bubble" in out and "peak memory 1 microbatch stashed" in out

    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["makespan"] == pytest.approx(metrics.makespan)
    assert doc["bubble_fraction"] == pytest.approx(metrics.bubble_fraction)
    assert [r["peak_activations"] for r in doc["ranks"]] == [r.peak_activations for r in metrics.ranks]
    assert [r["bubble_fraction"] for r in doc["ranks"]] == pytest.approx([r.bubble_fraction for r in metrics.ranks])
    assert len(doc["spans"]) == schedule.num_actions
    assert set(doc["spans"][0]) >= {"rank", "action", "start", "end"}

    back = load_schedule(tmp_path / "s.csv")
    assert back.actions == schedule.actions and back.stage_to_rank == schedule.stage_to_rank
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == schedule.num_actions
    assert b"Plotly.newPlot" in (tmp_path / "g.html").read_bytes()


def test_w_splits_the_backward_and_recompute_adds_a_forward(capsys, tmp_path):
    out = tmp_path / "t.json"
    code, _, err = run(
        capsys,
        "simulate",
        "--schedule",
        "zb-h1",
        "--ranks",
        "2",
        "--microbatches",
        "2",
        "--f",
        "1",
        "--b",
        "3",
        "--w",
        "1",
        "--recompute",
        "--json",
        str(out),
    )
    assert code == 0, err
    spans = _spans(json.loads(out.read_text()))
    assert spans["0I0"]["end"] - spans["0I0"]["start"] == pytest.approx(3 - 1 + 1)  # I = B - W, plus the recompute
    assert spans["0W0"]["end"] - spans["0W0"]["start"] == pytest.approx(1)


def test_per_stage_times_with_virtual_stages(capsys, tmp_path):
    out = tmp_path / "t.json"
    code, _, err = run(
        capsys,
        "simulate",
        "--schedule",
        "interleaved-1f1b",
        "--ranks",
        "2",
        "--microbatches",
        "4",
        "--virtual-stages",
        "2",
        "--f",
        "1,2,3,4",
        "--b",
        "2",
        "--json",
        str(out),
    )
    assert code == 0, err
    spans = _spans(json.loads(out.read_text()))
    for stage, forward in enumerate([1, 2, 3, 4]):
        assert spans[f"{stage}F0"]["end"] - spans[f"{stage}F0"]["start"] == pytest.approx(forward)
        assert spans[f"{stage}B0"]["end"] - spans[f"{stage}B0"]["start"] == pytest.approx(2)


def test_cost_file_and_its_conflicts(capsys, tmp_path):
    cost = CostModel.uniform(2.0, 5.0, comm_ms=1.0)
    save_cost(cost, tmp_path / "cost.json")
    code, out, err = run(
        capsys,
        "simulate",
        "--schedule",
        "gpipe",
        "--ranks",
        "2",
        "--microbatches",
        "2",
        "--cost",
        str(tmp_path / "cost.json"),
    )
    assert code == 0, err
    expected = compute_metrics(simulate(build_schedule("gpipe", 2, 2), cost)).makespan
    assert f"makespan {expected:.3f} ms" in out
    assert "peak memory 2 B (2 microbatches stashed)" in out  # a cost file carries real sizes: 1 byte each here
    assert_usage_error(
        run(
            capsys,
            "simulate",
            "--schedule",
            "gpipe",
            "--ranks",
            "2",
            "--microbatches",
            "2",
            "--cost",
            str(tmp_path / "cost.json"),
            "--f",
            "1",
        ),
        "--cost",
        "--f",
    )
    (tmp_path / "bad.json").write_text("{")
    assert_usage_error(
        run(
            capsys,
            "simulate",
            "--schedule",
            "gpipe",
            "--ranks",
            "2",
            "--microbatches",
            "2",
            "--cost",
            str(tmp_path / "bad.json"),
        ),
        "not valid JSON",
    )
    assert_usage_error(
        run(
            capsys,
            "simulate",
            "--schedule",
            "gpipe",
            "--ranks",
            "2",
            "--microbatches",
            "2",
            "--cost",
            str(tmp_path / "missing.json"),
        ),
        "missing.json",
    )


def test_simulate_a_custom_csv(capsys, tmp_path):
    schedule = build_schedule("zbv", 2, 4)
    path = tmp_path / "mine.csv"
    path.write_text(schedule_to_csv(schedule), newline="")
    code, out, err = run(capsys, "simulate", "--csv-in", str(path), "--f", "1", "--b", "2", "--w", "1")
    assert code == 0, err
    # per rank, cut per chunk (zbv holds two per rank): the same meaning compare and the app give them
    expected = compute_metrics(simulate(schedule, CostModel.uniform(0.5, 1.0, 0.5))).makespan
    assert out.startswith("mine: 2 ranks, 4 stages, 4 microbatches")
    assert f"makespan {expected:.3f} ms" in out


def test_bad_csv_inputs_are_one_line_errors(capsys, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("0F0,0B0\n1F0,1Q0,1B0\n")
    assert_usage_error(run(capsys, "simulate", "--csv-in", str(path)), "rank 1", "cell 2", "1Q0", "2F0")
    path.write_text("0F0,0B0\n1B0,1F0\n")  # rank 1 runs the backward before its own forward
    assert_usage_error(run(capsys, "simulate", "--csv-in", str(path)))
    assert_usage_error(run(capsys, "simulate", "--csv-in", str(path), "--ranks", "2"), "--csv-in")


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["simulate", "--schedule", "nope", "--ranks", "2", "--microbatches", "2"], ["nope", "1f1b", "zb-h1"]),
        (["simulate", "--schedule", "1f1b", "--ranks", "2"], ["--microbatches"]),
        (["simulate", "--schedule", "1f1b", "--ranks", "0", "--microbatches", "2"], ["--ranks", ">= 1"]),
        (["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2", "--f", "fast"], ["--f", "fast"]),
        (["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2", "--bogus"], ["--bogus"]),
        (["simulate", "--ranks", "2", "--microbatches", "2"], ["--schedule", "--csv-in"]),
        (
            ["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2", "--virtual-stages", "2"],
            ["num_virtual_stages"],
        ),
        (["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2", "--f", "1,2,3"], ["3 stages"]),
        (["simulate", "--schedule", "interleaved-1f1b", "--ranks", "4", "--microbatches", "9"], ["multiple"]),
        (["frobnicate"], ["frobnicate"]),
        ([], ["required"]),
        (["compare", "--schedules", "1f1b,nope", "--ranks", "2", "--microbatches", "2"], ["nope"]),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv, needles):
    assert_usage_error(run(capsys, *argv), *needles)


def test_compare_prints_a_table_and_writes_rows(capsys, tmp_path):
    code, out, err = run(
        capsys,
        "compare",
        "--schedules",
        "1f1b,gpipe,interleaved-1f1b",
        "--ranks",
        "4",
        "--microbatches",
        "9",
        "--virtual-stages",
        "2",
        "--json",
        str(tmp_path / "rows.json"),
        "--html",
        str(tmp_path / "cmp.html"),
    )
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.startswith("1f1b") for line in lines) and any(line.startswith("gpipe") for line in lines)
    assert "interleaved-1f1b   error:" in out
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert [row["schedule"] for row in rows] == ["1f1b", "gpipe", "interleaved-1f1b"]
    assert rows[2]["error"] and rows[0]["makespan"] > 0
    assert (tmp_path / "cmp.html").stat().st_size > 1_000_000


def test_compare_takes_the_knobs_simulate_takes_and_gives_the_rows_simulate_gives(capsys, tmp_path):
    """--offload and --seq-chunks reach each family that takes them: every row equals simulate's of that family."""
    common = ["--ranks", "4", "--microbatches", "8", "--host-latency", "3", "--offload", "full"]
    code, out, err = run(
        capsys, "compare", "--schedules", "1f1b,seq1f1b", "--seq-chunks", "4", "--json", str(tmp_path / "rows.json"),
        *common,
    )  # fmt: skip
    assert code == 0, err
    rows = {row["schedule"]: row for row in json.loads((tmp_path / "rows.json").read_text())["rows"]}
    assert rows["seq1f1b"]["stashed_microbatches"] == rows["seq1f1b"]["peak_activations"] / 4
    seq_line = next(line for line in out.splitlines() if line.startswith("seq1f1b"))
    assert seq_line.endswith(f"{rows['seq1f1b']['stashed_microbatches']:g} microbatches"), seq_line  # not chunks
    for name, extra in (("1f1b", []), ("seq1f1b", ["--seq-chunks", "4"])):
        out = tmp_path / f"{name}.json"
        code, _, err = run(capsys, "simulate", "--schedule", name, *extra, *common, "--json", str(out))
        assert code == 0, err
        assert rows[name]["step_ms"] == pytest.approx(json.loads(out.read_text())["step_ms"])
    # copies of 3 ms each cost time: the same row without --offload is quicker, so the flag was not dropped
    code, _, err = run(
        capsys, "compare", "--schedules", "1f1b", "--ranks", "4", "--microbatches", "8", "--json",
        str(tmp_path / "plain.json"),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads((tmp_path / "plain.json").read_text())["rows"][0]["step_ms"] < rows["1f1b"]["step_ms"]


def test_images_without_a_browser_fail_clearly_but_html_is_written(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(export, "find_browser", lambda: None)
    code, _, err = run(
        capsys,
        "simulate",
        "--schedule",
        "1f1b",
        "--ranks",
        "2",
        "--microbatches",
        "2",
        "--html",
        str(tmp_path / "g.html"),
        "--png",
        str(tmp_path / "g.png"),
    )
    assert code == 1
    assert "Chromium" in err and err.count("\n") == 1
    assert (tmp_path / "g.html").exists() and not (tmp_path / "g.png").exists()


@pytest.mark.skipif(not export.images_available(), reason="no Chrome/Chromium for kaleido")
def test_svg_output(capsys, tmp_path):
    code, _, err = run(
        capsys,
        "simulate",
        "--schedule",
        "zb-h1",
        "--ranks",
        "2",
        "--microbatches",
        "2",
        "--svg",
        str(tmp_path / "g.svg"),
    )
    assert code == 0, err
    assert b"<svg" in (tmp_path / "g.svg").read_bytes()[:200]


def test_python_dash_m_pipesim_runs_in_a_subprocess(tmp_path):
    out = tmp_path / "t.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipesim",
            "simulate",
            "--schedule",
            "1f1b",
            "--ranks",
            "2",
            "--microbatches",
            "3",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "makespan" in result.stdout
    assert json.loads(out.read_text())["makespan"] > 0


def test_steps_in_a_row_with_and_without_a_barrier(capsys):
    base = [
        "simulate",
        "--schedule",
        "zb-h2",
        "--ranks",
        "4",
        "--microbatches",
        "8",
        "--f",
        "1",
        "--b",
        "2",
        "--w",
        "1",
        "--overhead",
        "0.5",
        "--steps",
        "4",
    ]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "step time 27.500 ms" in out and "110.000 ms in all, steady step 27.500 ms" in out
    assert main([*base, "--no-barrier"]) == 0
    assert "101.000 ms in all, steady step 24.500 ms" in capsys.readouterr().out  # ZB-H2's tail fills with W's


def test_overhead_and_dispatch_per_rank_are_checked(capsys):
    args = ["simulate", "--schedule", "1f1b", "--ranks", "4", "--microbatches", "8"]
    assert main([*args, "--overhead", "1,2"]) == 2
    assert "--overhead has 2 values for 4 ranks: give 1 or 4" in capsys.readouterr().err
    assert main([*args, "--dispatch", "0.1"]) == 0
    from dataclasses import replace

    from pipesim.sim.steps import rank_ends, step_time_ms

    cost = replace(CostModel.uniform(1.0, 2.0), runtime=RankRuntime(dispatch_ms=(0.1,)))
    expected = step_time_ms(rank_ends(simulate(build_schedule("1f1b", 4, 8), cost)), (0.0,) * 4)
    assert expected > 33.0 + 1.0  # the gaps are paid on the critical path
    assert f"step time {expected:.3f} ms" in capsys.readouterr().out
