"""verify-plan's interleaved rounds, confidence intervals and groups, on synthetic runs (a fake launcher).
The second verification in the same runs folder, for real, is part of tests/test_verify.py's real run (one
torchrun start-up less)."""

from __future__ import annotations

import json
import statistics

import pytest

from pipesim_executor.host import verify
from pipesim_executor.host.verify import VerifyRow, compare, plan_candidates, spearman
from tests.test_verify import _FakeRun, small_plan


@pytest.fixture
def plan_file(tmp_path):
    return small_plan(tmp_path)


# --- issue 29: interleaved rounds, confidence intervals, groups, a second verification in the same folder --------


QUIET = {"available": True, "wall_s": 30.0, "cores": 2, "other_cores": 0.02, "own_cores": 1.9, "steal": 0.0,
         "load_1min_start": 1.5, "load_1min_end": 1.8}  # fmt: skip
BUSY = {**QUIET, "other_cores": 1.13, "own_cores": 0.86, "load_1min_end": 4.2}  # two busy loops beside 2 ranks


def _probe_reading(monkeypatch, record):
    """The verification's load probe reads `record` (the fake runs take no time: the real counters would read
    whatever the tests' other workers did)."""

    class Probe:
        def finish(self):
            return dict(record)

    monkeypatch.setattr(verify, "LoadProbe", Probe)


def _fake_launcher(monkeypatch, plan_file, started, step_of=None, load=QUIET):
    """start_run replaced by finished runs: candidate i measures its prediction x 1.05 (or `step_of(i, round)`)."""
    from pipesim_executor.host import launch

    _probe_reading(monkeypatch, load)

    plan = json.loads(plan_file.read_text())

    def fake_start(config, runs_root, name, schedule=None, held=None):
        from pipesim_executor.host import machine

        round_, index = (int(x) for x in name.rsplit("-r", 1)[1].split("-c"))
        # the verification holds the machine through every run, and hands its lock to each
        assert held is not None and held.held and machine.holder().command == "verify-plan"
        started.append((name, round_, index))
        candidate = plan_candidates(plan, 10)[index]
        step = candidate["step_ms"] * 1.05 if step_of is None else step_of(index, round_)
        return _FakeRun(runs_root / name, step, list(candidate["rank_memory_bytes"]))

    monkeypatch.setattr(launch, "start_run", fake_start)


def test_candidates_run_in_interleaved_rounds(plan_file, tmp_path, monkeypatch):
    """A B C, A B C, A B C: catches candidates measured one after another (all of A's runs, then B's)."""
    started = []
    _fake_launcher(monkeypatch, plan_file, started)
    result = verify.verify_plan(plan_file, 3, runs_root=tmp_path / "runs", rounds=3)
    assert [(r, i) for _, r, i in started] == [(r, i) for r in range(3) for i in range(3)]
    assert all(len(row.round_step_times_ms) == 3 and len(row.run_dirs) == 3 for row in result.rows)
    assert result.rounds == 3


def test_verifying_again_in_the_same_folder_keeps_the_first_verification(plan_file, tmp_path, monkeypatch):
    """The second verification of a plan used to be refused: its first run's folder (verify-plan-0) existed."""
    runs = tmp_path / "runs"
    (runs / "verify-plan-0").mkdir(parents=True)  # a run folder of a verification made before issue 29
    started = []
    _fake_launcher(monkeypatch, plan_file, started)
    first = verify.verify_plan(plan_file, 2, runs_root=runs, rounds=2)
    second = verify.verify_plan(plan_file, 2, runs_root=runs, rounds=2)
    assert all(r.error is None and r.measured_ms is not None for r in first.rows + second.rows)
    names = [name for name, _, _ in started]
    assert len(names) == len(set(names)) == 8
    assert all(n.startswith("verify-plan-1-") for n in names[:4]) and all(
        n.startswith("verify-plan-2-") for n in names[4:]
    )
    assert {p.name for p in runs.iterdir()} >= {"verify-plan-0", *names}  # nothing measured before is lost
    kept = [json.loads(plan_file.with_name(f"plan-verify-{n}.json").read_text())["verification"] for n in (1, 2)]
    assert kept == ["verify-plan-1", "verify-plan-2"]


def test_a_second_verification_runs_for_real_in_the_same_folder(plan_file, tmp_path):
    """The launcher's own refusal of a taken run folder, not a fake one: the names of two verifications differ."""
    runs = tmp_path / "runs"
    (runs / "verify-plan-0").mkdir(parents=True)
    first = verify.verification_prefix(runs, "plan")
    (runs / f"{first}-r0-c0").mkdir()
    assert (first, verify.verification_prefix(runs, "plan")) == ("verify-plan-1", "verify-plan-2")
    assert verify.verification_prefix(runs, "my plan!") == "verify-my_plan-0"


def test_the_json_carries_intervals_groups_and_whether_the_median_is_inside(plan_file, tmp_path, monkeypatch):
    plan = json.loads(plan_file.read_text())
    for c in plan["candidates"]:  # the prediction half writes these keys: here by hand
        if c.get("step_ms") is not None:
            c.update(
                step_ms_p05=c["step_ms"] * 0.9, step_ms_p95=c["step_ms"] * 1.1, extrapolated=c["microbatch_size"] > 1
            )
    plan_file.write_text(json.dumps(plan))
    top = plan_candidates(plan, 3)
    # candidates 0 and 1 measure the same (one group), candidate 2 twice as slow
    _fake_launcher(monkeypatch, plan_file, [], step_of=lambda i, r: 10.0 + r * 0.1 if i < 2 else 20.0 + r * 0.1)
    out = tmp_path / "v.json"
    verify.verify_plan(plan_file, 3, runs_root=tmp_path / "runs", rounds=3, json_out=out)
    written = json.loads(out.read_text())
    for row, c in zip(written["candidates"], top, strict=True):
        assert row["predicted_p05_ms"] == pytest.approx(c["step_ms"] * 0.9)
        assert row["predicted_p95_ms"] == pytest.approx(c["step_ms"] * 1.1)
        assert row["extrapolated"] is (c["microbatch_size"] > 1)
        assert row["measured_ci_low_ms"] <= row["measured_ms"] <= row["measured_ci_high_ms"]
        inside = row["predicted_p05_ms"] <= row["measured_ms"] <= row["predicted_p95_ms"]
        assert row["inside_predicted_interval"] is inside
    labels = [row["label"] for row in written["candidates"]]
    assert len(written["indistinguishable"]) == 1 and set(written["indistinguishable"][0]) == set(labels[:2])
    assert written["recommended_indistinguishable"] is True and written["rounds"] == 3
    assert written["verification"] == "verify-plan-0"


def test_a_plan_without_intervals_is_compared_with_its_point_prediction(plan_file, tmp_path, monkeypatch):
    _fake_launcher(monkeypatch, plan_file, [])
    result = verify.verify_plan(plan_file, 2, runs_root=tmp_path / "runs", rounds=1)
    for row in result.rows:
        assert row.predicted_p05_ms == row.predicted_p95_ms == row.predicted_ms
        assert row.inside_predicted_interval is None and row.extrapolated is False


def test_spearman_counts_only_the_pairs_the_measurement_can_order():
    """Predicted 10 < 11 < 20 < 21, measured 12.0 and 11.9 with overlapping intervals (one group), then 20 and 30:
    the swap inside the group is noise, so the rank correlation is 1 less the tie's own share, not 0.8."""
    from pipesim.analysis.stats import MedianCI

    def row(name, predicted, ci):
        r = VerifyRow(name, {}, predicted, ci.median)
        r.measured_ci_low_ms, r.measured_ci_high_ms = ci.low, ci.high
        return r

    rows = [
        row("a", 10, MedianCI(12.0, 11.5, 12.5)),
        row("b", 11, MedianCI(11.9, 11.4, 12.4)),
        row("c", 20, MedianCI(20, 19.5, 20.5)),
        row("d", 21, MedianCI(30, 29, 31)),
    ]
    result = compare(rows)
    assert result.indistinguishable == [["b", "a"]]
    assert result.spearman == pytest.approx(spearman([1, 2, 3, 4], [1.5, 1.5, 3, 4]))
    assert result.recommended_gap == pytest.approx(12.0 / 11.9 - 1) and result.recommended_indistinguishable
    lines = "\n".join(verify.summary_lines(result))
    assert "indistinguishable (group 1, overlapping 95% CIs): b, a" in lines and "indistinguishable from it" in lines


def test_a_noisy_candidate_is_flagged_by_the_run_pages_rule():
    from pipesim.analysis.attribution import NOISY_STEP_CV

    calm, noisy = VerifyRow("calm", {}, 10.0), VerifyRow("noisy", {}, 10.0)
    calm.add_round([10.0, 10.1, 9.9], "r0")
    noisy.add_round([10.0, 10.0 * (1 + 3 * NOISY_STEP_CV), 10.0 * (1 - 3 * NOISY_STEP_CV)], "r1")
    assert calm.noisy is False and noisy.noisy is True
    result = compare([calm, noisy])
    assert any("too noisy" in note and "noisy" in note for note in result.notes)


# --- issue 46: a verification that knows the machine moved; intervals that inform ---------------------------------


def _with_intervals(plan_file, half: float) -> dict:
    plan = json.loads(plan_file.read_text())
    for c in plan["candidates"]:
        if c.get("step_ms") is not None:
            c.update(step_ms_p05=c["step_ms"] * (1 - half), step_ms_p95=c["step_ms"] * (1 + half))
    plan_file.write_text(json.dumps(plan))
    return plan


def test_rounds_that_move_3x_make_the_verification_not_comparable(plan_file, tmp_path, monkeypatch, capsys):
    """Issue 46's verification: every candidate's rounds 3x apart (315-398 ms, then 110-131 ms). It used to say
    'indistinguishable' and '100% inside'; now: not comparable, in the JSON's status and a non-zero exit."""
    from pipesim_executor.host.cli import main as executor_main

    plan = _with_intervals(plan_file, 0.6)  # +-60%: nothing it could count
    top = plan_candidates(plan, 3)
    speed = (1.0, 0.6, 0.33)
    _fake_launcher(monkeypatch, plan_file, [], step_of=lambda i, r: top[i]["step_ms"] * (1 + 0.2 * i) * speed[r])
    out = tmp_path / "v.json"
    argv = ["verify-plan", str(plan_file), "--top", "3", "--rounds", "3", "--runs-root", str(tmp_path / "runs")]
    assert executor_main([*argv, "--json", str(out)]) == 3
    text = capsys.readouterr().out
    summary = text[text.index("not comparable") :]  # the verdict comes first, before the table
    assert summary.startswith("not comparable: the machine's speed changed during this verification (round medians")
    assert summary.splitlines()[1].startswith("candidate ")
    assert "indistinguishable" not in text and "did not move" not in text
    assert "no informative interval: all 3 predicted 90% intervals are wider than +-25%" in text
    written = json.loads(out.read_text())
    assert written["status"] == "not_comparable" and written["round_effect"]["moved"] is True
    assert written["round_effect"]["move"] == pytest.approx(1 / 0.33 - 1, rel=0.05)
    assert written["inside_predicted_interval_fraction"] is None and written["informative_intervals"] == 0
    assert all(c["informative"] is False for c in written["candidates"])


def test_runs_that_waited_for_cores_make_the_verification_not_comparable(plan_file, tmp_path, monkeypatch, capsys):
    """Issue 46's busy machine: two busy loops beside the ranks (other processes 1.13 of 2 cores). Its rounds were
    steady and every interval too wide to count, so nothing said the errors (35%) were the machine's: now the
    verification says not comparable, names the load, claims no group, and exits 3. The same runs with the
    machine to themselves are ok."""
    from pipesim_executor.host.cli import main as executor_main

    plan = _with_intervals(plan_file, 0.6)
    top = plan_candidates(plan, 3)
    _fake_launcher(monkeypatch, plan_file, [], step_of=lambda i, r: top[i]["step_ms"] * 1.35, load=BUSY)
    out = tmp_path / "v.json"
    argv = ["verify-plan", str(plan_file), "--top", "3", "--rounds", "3", "--runs-root", str(tmp_path / "runs")]
    assert executor_main([*argv, "--json", str(out)]) == 3
    text = capsys.readouterr().out
    summary = text[text.index("not comparable") :]
    assert summary.startswith("not comparable: other work shared the machine with this verification")
    assert "other processes used 1.13 of its 2 cores on average while it ran, its own processes 0.86" in summary
    assert summary.splitlines()[1].startswith("candidate ") and "indistinguishable (group" not in text
    assert "(not comparable: other work shared the machine)" in text
    written = json.loads(out.read_text())
    assert written["status"] == "not_comparable" and written["not_comparable_because"] == ["machine_shared"]
    assert written["machine_load"] == BUSY and written["round_effect"]["moved"] is False
    _probe_reading(monkeypatch, QUIET)
    again = tmp_path / "again.json"
    assert executor_main([*argv, "--json", str(again)]) == 0
    assert json.loads(again.read_text())["not_comparable_because"] == []


def test_steady_rounds_are_ok_and_coverage_counts_informative_intervals_only(plan_file, tmp_path, monkeypatch):
    plan = _with_intervals(plan_file, 0.1)
    top = plan_candidates(plan, 3)
    wide = top[2]
    wide.update(step_ms_p05=wide["step_ms"] * 0.5, step_ms_p95=wide["step_ms"] * 1.5)  # +-50%: not informative
    plan_file.write_text(json.dumps(plan))
    _fake_launcher(monkeypatch, plan_file, [], step_of=lambda i, r: top[i]["step_ms"] * (1.05, 1.3, 1.0)[i])
    result = verify.verify_plan(plan_file, 3, runs_root=tmp_path / "runs", rounds=3)
    summary = result.to_dict()
    assert result.status == "ok" and summary["status"] == "ok" and not result.round_effect.moved
    # inside (5% off, +-10%), outside (30% off): 1 of 2 informative; the third, inside +-50%, is not a hit
    assert [r.hit for r in result.rows] == [True, False, None] and result.rows[2].inside_predicted_interval
    assert summary["informative_intervals"] == 2 and summary["not_informative_intervals"] == 1
    assert summary["inside_predicted_interval_fraction"] == pytest.approx(0.5)
    lines = verify.summary_lines(result)
    assert (
        "measured median inside the predicted 90% interval: 50% of 2 informative intervals; 1 not informative "
        "(wider than +-25%), not counted" in lines
    )
    assert any("(interval not informative)" in line for line in lines)


def test_a_measured_move_since_the_profile_is_taken_out_of_the_errors():
    from pipesim.analysis.since_profile import SinceProfile

    rows = [VerifyRow("a", {}, 100.0), VerifyRow("b", {}, 50.0)]
    for row, measured in zip(rows, (110.0, 54.0), strict=True):
        for r in range(3):
            row.add_round([measured * (1 + 0.001 * r)] * 4, f"r{r}")
    result = compare(rows, rounds=3)
    result.since_profile = SinceProfile(4, 1.10, 1.06, 1.14, -0.01)  # the machine ran 10% slower than the profile
    summary = result.to_dict()
    assert summary["move_since_profile"] == pytest.approx(1.10)
    without = [c["error_move_removed"] for c in summary["candidates"]]
    assert without == pytest.approx([100 * 1.1 / rows[0].measured_ms - 1, 50 * 1.1 / rows[1].measured_ms - 1])
    assert summary["median_abs_error_move_removed"] == pytest.approx(statistics.median(abs(w) for w in without))
    assert any(line.startswith("with the machine's move since the profile (1.100x) taken out") for line in
               verify.summary_lines(result))  # fmt: skip
    result.since_profile = SinceProfile(4, 1.02, 0.98, 1.06, -0.01)  # not measured: nothing taken out
    assert result.to_dict()["median_abs_error_move_removed"] is None
    assert result.to_dict()["candidates"][0]["error_move_removed"] is None


def test_a_gap_that_only_the_shared_drift_hides_is_told_apart():
    """Candidates b 6% slower than a in every round, the rounds moving together by 8% (significant, under the 10%
    that makes a verification not comparable): their intervals, widened by the drift, overlap, but the drift is
    shared, so with it divided out the two are ordered, not called indistinguishable."""
    drift, launch = (1.0, 1.05, 0.97), ((1.0, 1.004, 0.997), (0.996, 1.0, 1.005), (1.003, 0.998, 1.0))
    rows = [VerifyRow(name, {}, predicted) for name, predicted in (("a", 100.0), ("b", 106.0), ("c", 130.0))]
    for row, level, noise in zip(rows, (100.0, 106.0, 130.0), launch, strict=True):
        for r in range(3):
            row.add_round([level * drift[r] * noise[r] * k for k in (0.99, 1.0, 1.01) * 4], f"r{r}")
    result = compare(rows, rounds=3)
    assert result.round_effect.significant and not result.round_effect.moved and result.status == "ok"
    assert rows[0].measured_ci.overlaps(rows[1].measured_ci)  # the reported intervals carry the drift ...
    assert result.indistinguishable == []  # ... the ordering does not
    assert result.spearman == pytest.approx(1.0) and result.measured_best == "a"
    assert any("the rounds moved together" in note for note in result.notes)


def test_a_plan_from_a_disturbed_profile_is_said_so(plan_file, tmp_path, monkeypatch):
    plan = json.loads(plan_file.read_text())
    plan["calibration"]["disturbance"] = {"disturbed": True, "accepted": True, "line": "disturbed: ..."}
    plan_file.write_text(json.dumps(plan))
    _fake_launcher(monkeypatch, plan_file, [])
    result = verify.verify_plan(plan_file, 2, runs_root=tmp_path / "runs", rounds=1)
    assert "the plan was made from a disturbed profile (--accept-disturbed-profile)" in result.notes
