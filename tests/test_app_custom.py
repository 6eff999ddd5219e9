"""AppTest of the Custom schedule page: CSV in torch's format, problems shown at their cells."""

from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from pipesim.io import formats
from pipesim.schedules import build_schedule
from tests.helpers.app_charts import chart_figures, chart_titles


@pytest.fixture
def app(open_page) -> AppTest:
    return open_page("custom")


def paste(at: AppTest, text: str) -> AppTest:
    at.text_area(key="custom-paste-text").set_value(text)
    at.button(key="FormSubmitter:custom-paste-Use this text").click()
    return at.run()


def problem_table(at: AppTest):
    (styled,) = [d for d in at.dataframe if "problem" in d.value.columns]
    return styled


def highlighted_cells(styled) -> set[tuple[int, int]]:
    """(row, column) of the cells the problems name, on the edited table itself (issue 13 item 11, issue 23 item
    1): each marked row's "problem" note (the first column, on screen however wide the table) names "cell N";
    the cell's own text starts with the mark, and the row's name and that column's header carry it too."""
    frame = styled.value
    labels = json.loads(styled.proto.columns)
    assert frame.columns[0] == "problem"
    cells = set()
    for row, note in enumerate(frame["problem"]):
        for number in re.findall(r"cell (\d+)", note or ""):
            name = f"cell {number}"
            assert frame.index[row].endswith("⚠"), frame.index[row]  # the row is marked
            assert labels[name]["label"].endswith("⚠")  # and the column's header
            assert frame.loc[frame.index[row], name].startswith("⚠"), frame.loc[frame.index[row], name]  # the cell
            cells.add((row, int(number) - 1))
    assert styled.proto.editing_mode, "the problems must be shown on the editable table"
    return cells


def test_default_is_a_valid_1f1b(app: AppTest) -> None:
    assert any(s.value.startswith("Valid: custom: 2 ranks") for s in app.success)
    assert app.session_state["custom_csv"].replace("\r\n", "\n") == formats.schedule_to_csv(
        build_schedule("1f1b", 2, 4)
    ).replace("\r\n", "\n")
    assert len(chart_figures(app)) == 1


def test_bad_cell_is_highlighted_with_its_message(app: AppTest) -> None:
    paste(app, "0F0,0B0\r\n1F0,1Q0\r\n")
    # issue 33 item 7: every problem, not only the reader's first: 1Q0 unreadable, and so 1F0 has no backward
    assert "2 problems" in app.error[0].value
    styled = problem_table(app)
    assert highlighted_cells(styled) == {(1, 1), (1, 0)}
    notes = styled.value["problem"]
    assert "cannot parse '1Q0'" in notes.iloc[1] and notes.iloc[0] == ""
    assert not chart_figures(app) and not app.exception


def test_structural_problem_points_at_the_action(app: AppTest) -> None:
    paste(app, "0F0,,0F0,0B0\r\n1F0,1B0\r\n")  # 0F0 twice, the second after an idle cell
    styled = problem_table(app)
    assert highlighted_cells(styled) == {(0, 2)}  # the cell index counts the idle slot
    assert "duplicate F" in styled.value["problem"].iloc[0] and styled.value["problem"].iloc[1] == ""


def test_deadlock_marks_the_cycle_and_links_the_dag(app: AppTest) -> None:
    paste(app, "0F0,0B0,0F1,0B1\r\n1F1,1B1,1F0,1B0\r\n")
    assert "Deadlock" in app.error[0].value and "waits at" in app.error[0].value
    cells = highlighted_cells(problem_table(app))
    assert (1, 0) in cells and (0, 1) in cells  # 1F1 and 0B0 are in the cycle
    app.button(key="custom-dag").click().run()  # opens the DAG page on this schedule
    assert app.radio(key="dag-origin").value == "Custom schedule (Custom page)"
    titles = chart_titles(app)
    assert titles and "custom" in titles[0] and "1f1b" not in titles[0]


def test_cells_count_from_1_as_the_messages_and_empty_cells_are_blank(app: AppTest) -> None:
    """Item 11: headers "cell 1..", messages say the same cell, empty cells are not "None"."""
    paste(app, "0F0,,0F0,0B0\r\n1F0,1B0\r\n")  # the duplicate 0F0 is in the third cell
    styled = problem_table(app)
    frame = styled.value
    assert list(frame.columns[1:4]) == ["cell 1", "cell 2", "cell 3"]
    assert frame.loc[frame.index[0], "cell 2"] == "" and "None" not in frame.to_string()
    message = frame["problem"].iloc[0]
    assert message.startswith("cell 3: ") and "#2" in message and "position" not in message


def test_upload_replaces_the_table(app: AppTest) -> None:
    text = formats.schedule_to_csv(build_schedule("gpipe", 3, 2))
    app.file_uploader(key="custom-upload").set_value(("gpipe.csv", text.encode(), "text/csv")).run()
    assert any("3 ranks" in s.value for s in app.success)
    assert app.data_editor[0].value.shape[0] == 3 + 2  # 3 ranks and 2 spare rows to add ranks


def test_template_loads_a_registered_schedule(app: AppTest) -> None:
    app.selectbox(key="custom-template-name").set_value("zb-h1")
    app.number_input(key="custom-template-ranks").set_value(3)
    app.button(key="FormSubmitter:custom-template-Load").click().run()
    assert app.session_state["custom_csv"] == formats.schedule_to_csv(build_schedule("zb-h1", 3, 4))
    assert any("3 ranks" in s.value for s in app.success)


def test_editing_a_cell_revalidates(app: AppTest) -> None:
    key = f"custom-grid-{app.session_state['custom_version']}"
    app.session_state[key] = {"edited_rows": {0: {"cell 2": "0F9"}}, "added_rows": [], "deleted_rows": []}
    app.run()
    assert app.error and (0, 1) in highlighted_cells(problem_table(app))
    app.session_state[key] = {"edited_rows": {}, "added_rows": [], "deleted_rows": []}
    app.run()
    assert not app.error  # undoing the edit brings the valid schedule back


def test_valid_schedule_goes_to_the_run_page(app: AppTest) -> None:
    paste(app, formats.schedule_to_csv(build_schedule("gpipe", 2, 4)))
    app.button(key="custom-send").click().run()
    sent = app.session_state["run_schedule"]
    assert sent.num_ranks == 2 and sent.actions == build_schedule("gpipe", 2, 4).actions
    assert app.toggle(key="run-use-custom").value is True  # the Run page runs it


def test_simulation_uses_the_cost_inputs(app: AppTest) -> None:
    app.number_input(key="cost-f").set_value(2.0)
    app.button(key="FormSubmitter:custom-cost-form-Simulate").click().run()
    step = next(m.value for m in app.metric if m.label == "Step time")
    from pipesim.cost.model import CostModel
    from pipesim.sim.steps import simulate_step
    from pipesim.units import format_ms

    expected = simulate_step(build_schedule("1f1b", 2, 4), CostModel.uniform(2.0, 2.0, weight_ms=1.0)).step_ms
    assert step == format_ms(expected)


def test_too_large_csv_is_refused(app: AppTest) -> None:
    paste(app, "\r\n".join(f"{r}F0,{r}B0" for r in range(40)) + "\r\n")
    assert "at most 32" in app.error[0].value
    assert not app.exception


def test_exports_of_the_custom_gantt(app: AppTest) -> None:
    labels = {b.label for b in app.get("download_button")}
    assert {"Interactive HTML", "Schedule CSV (torch)", "Timeline JSON"} <= labels
    figure = chart_figures(app)[0]
    assert figure["layout"]["title"]["text"].startswith("custom")


def test_missing_backward_points_at_its_forward(app: AppTest) -> None:
    paste(app, "0F0,0B0,0F1\r\n1F0,1B0,1F1,1B1\r\n")  # 0F1 never gets its backward
    styled = problem_table(app)
    assert highlighted_cells(styled) == {(0, 2)}
    assert "0B1" in styled.value["problem"].iloc[0] or "0I1" in styled.value["problem"].iloc[0]


def test_torchs_compute_comms_file_is_read_and_its_problems_point_at_cells(app: AppTest) -> None:
    paste(app, "0F0,0SEND_F0,0RECV_B0,0B0\r\n1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD\r\n")
    assert not app.error and not app.exception and chart_figures(app)
    paste(app, "0F0,0RECV_B0,0B0,0SEND_F0\r\n1F0,1RECV_F0,1B0,1SEND_B0\r\n")  # the receive after its consumer
    styled = problem_table(app)
    assert highlighted_cells(styled) == {(1, 1)}
    assert "RECV_F too late" in styled.value["problem"].iloc[1]


def test_uniform_times_are_per_rank_on_a_schedule_with_chunks(app: AppTest) -> None:
    """The Custom page reads uniform times as `pipesim simulate --csv-in` does: per rank, cut per chunk.

    Catches the page taking them per stage (a 2-chunk schedule would run twice as long as the CLI says)."""
    schedule = build_schedule("interleaved-1f1b", 2, 4, num_virtual_stages=2)
    paste(app, formats.schedule_to_csv(schedule))
    app.number_input(key="cost-f").set_value(2.0)
    app.button(key="FormSubmitter:custom-cost-form-Simulate").click().run()
    step = next(m.value for m in app.metric if m.label == "Step time")
    from pipesim.cost.model import CostModel
    from pipesim.sim.steps import simulate_step
    from pipesim.units import format_ms

    per_chunk = CostModel.uniform(1.0, 1.0, weight_ms=0.5)  # F 2, B 2, W 1 per rank, two chunks per rank
    assert step == format_ms(simulate_step(schedule, per_chunk).step_ms)


def test_an_edit_that_breaks_the_schedule_shows_the_new_value_marked_and_keeps_the_costs(app: AppTest) -> None:
    """Issue 23 item 1: after an edit that makes the schedule invalid, the table shows what was typed (marked), not
    the old cell under a message naming the new one; the problem column is the first; the costs stay.

    Catches the table drawn from the text before the edit (0F1 shown while the error names 0X1), a bad cell left
    unmarked (only its row and column headers), and the cost sidebar dropped while the schedule is invalid."""
    text = formats.schedule_to_csv(build_schedule("1f1b", 2, 4))  # torch's compute_only CSV
    app.file_uploader(key="custom-upload").set_value(("1f1b.csv", text.encode(), "text/csv")).run()
    for row, cell, typed, replaced in ((0, "cell 2", "0X1", "0F1"), (1, "cell 1", "1B0", "1F0")):
        key = f"custom-grid-{app.session_state['custom_version']}"
        app.session_state[key] = {"edited_rows": {row: {cell: typed}}, "added_rows": [], "deleted_rows": []}
        app.run()
        assert app.error and not app.exception
        styled = problem_table(app)
        shown = styled.value.iloc[row][cell]
        assert shown == f"⚠ {typed}" and replaced not in styled.value.iloc[row].tolist()[1:3], styled.value
        assert (row, int(cell.split()[1]) - 1) in highlighted_cells(styled)
        assert app.button(key="FormSubmitter:custom-cost-form-Simulate") is not None  # the costs stay
        assert app.sidebar.radio(key="cost-source") is not None
        app.session_state[key] = {"edited_rows": {}, "added_rows": [], "deleted_rows": []}
        app.run()
        assert not app.error


def test_the_broken_example_reports_every_problem(app: AppTest) -> None:
    """Issue 33 item 7: the broken example said "1 problem" (its typo 0X1) and never its missing backward (1F1)."""
    paste(app, "0F0,0X1,0B0\r\n1F0,1B0,1F1\r\n")
    count = int(re.search(r"(\d+) problems", app.error[0].value).group(1))
    notes = problem_table(app).value["problem"]
    assert count >= 2 and "cannot parse '0X1'" in notes.iloc[0]
    assert re.search(r"cell 3: .*1B1|1F1.*backward|backward.*1", notes.iloc[1]), notes.iloc[1]
    listed = [m.value for m in app.markdown if m.value.startswith("- ") and not m.value.startswith("- **")]
    assert count == len(listed) and "0X1" in listed[0] and any("1B1" in line for line in listed), listed
