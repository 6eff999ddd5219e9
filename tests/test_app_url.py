"""Issue 35 group 5: the app's URL values, read through one strict reader (pipesim.url_query) before any page draws
a widget from them. A refused value leaves its widget at the default and is named, with why, in one notice;
no value raises on the page."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from app_pages.parts import schedule_knobs, state, url, whatif
from app_pages.parts.plan import model as plan_model
from app_pages.parts.plan import profile as plan_profile
from pipesim.cost.description import ModelDescription
from pipesim.form_fields import form_fields
from pipesim.url_query import UrlField, refused_values

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def load(monkeypatch, tmp_path, query: dict[str, str]) -> AppTest:
    monkeypatch.setenv("PIPESIM_RUNS_ROOT", str(tmp_path / "runs"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update(query)
    return at.run()


def notice(at: AppTest) -> str:
    return " ".join(w.value for w in at.warning)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"microbatches": "99999999999999999999"}, "'microbatches'"),
        ({"ranks": "10^20", "microbatches": "9" * 3000}, "'ranks'"),
        ({"run": "x" * 300}, "'run'"),
        ({"run": "é" * 150}, "'run'"),  # 300 bytes: longer than a file name may be
        ({"run": "../elsewhere"}, "'run'"),
        ({"ranks": "0"}, "'ranks'"),
        ({"ranks": "abc"}, "'ranks'"),
        ({"ranks": "１"}, "'ranks'"),
        ({"schedule": "nonesuch"}, "'schedule'"),
        ({"cost-f": "nan"}, "'cost-f'"),
        ({"nonesuch-key": "1"}, "no page reads this setting"),
        ({"slow-ranks": "1, 0"}, "'slow-ranks'"),  # a factor below 0.1
        ({"slow-ranks": "1, fast"}, "'slow-ranks'"),
        ({"link-delays": "0-1:5; rm"}, "'link-delays'"),
        ({"slow-kinds": "X"}, "'slow-kinds'"),
    ],
)
def test_a_refused_url_value_is_named_and_the_default_shown(monkeypatch, tmp_path, query, named):
    at = load(monkeypatch, tmp_path, query)
    assert not at.exception, [e.value for e in at.exception]
    assert named in notice(at) and len(at.warning) == 1
    assert at.number_input(key=state.RANKS).value == state.DEFAULT_RANKS
    assert at.number_input(key=state.MICROBATCHES).value == state.DEFAULT_MICROBATCHES
    assert at.selectbox(key=state.SCHEDULE).value == state.DEFAULT_SCHEDULE
    assert not set(query) & set(at.query_params)  # dropped from the URL too


def test_a_link_carries_the_what_if(monkeypatch, tmp_path):
    """Issue 30: the slowdowns and link delays are in the URL, so a shared link opens the same what-if."""
    at = load(monkeypatch, tmp_path, {"slow-ranks": "1, 1.5", "slow-kinds": "W", "link-delays": "2-3:4"})
    assert not at.exception and not notice(at)
    [said] = [i.value for i in at.info if "What-if" in i.value]
    assert "rank 1 1.5x slower in W" in said and "link 2-3 +4 ms" in said


def test_good_values_beside_refused_ones_are_used(monkeypatch, tmp_path):
    at = load(monkeypatch, tmp_path, {"ranks": "6", "schedule": "zbv", "microbatches": "1e3", "cost-f": "1.5"})
    assert not at.exception
    assert "'microbatches'" in notice(at) and "'ranks'" not in notice(at)
    assert at.number_input(key=state.RANKS).value == 6 and at.selectbox(key=state.SCHEDULE).value == "zbv"
    assert at.number_input(key="cost-f").value == 1.5


def test_every_page_survives_a_link_full_of_hostile_values(monkeypatch, tmp_path):
    hostile = {
        key: ("9" * 3000 if field.kind in ("int", "float") else "\x00" * 300) for key, field in url.fields().items()
    }
    for page in ("simulate", "compare", "dag", "custom", "plan", "run"):
        at = load(monkeypatch, tmp_path, {**hostile})
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])


def _bound_keys() -> set[str]:
    """Every widget key the pages bind to the URL, read from their source (`bind=` calls)."""
    names = {
        "state": state,
        "COST": state.COST,
        "prefix": state.COST,
        "kept": str,
        "_kept": str,
        "CALIBRATE_KEY": plan_model.CALIBRATE_KEY,
        "PROFILE_KEY": plan_profile.PROFILE_KEY,
        "SLOW_KEY": whatif.SLOW_KEY,
        "KINDS_KEY": whatif.KINDS_KEY,
        "LINKS_KEY": whatif.LINKS_KEY,
        "SENSITIVITY_KEY": whatif.SENSITIVITY_KEY,
        **{name: getattr(schedule_knobs, name) for name in schedule_knobs.KNOB_KEYS},
    }
    model_ints = ("num_layers", "hidden_size", "ffn_size", "num_heads", "seq_len", "microbatch_size")
    keys = set()
    for path in sorted((ROOT / "app_pages").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and any(k.arg == "bind" for k in node.keywords)):
                continue
            key = next(k.value for k in node.keywords if k.arg == "key")
            if isinstance(key, ast.Name) and path.name == "plan.py":  # the model fields, generated from the dataclass
                keys |= {f"plan-{spec.flag}" for spec in form_fields(ModelDescription)}
                continue
            for name in model_ints if "{name}" in ast.unparse(key) else ("",):
                keys.add(eval(compile(ast.Expression(key), str(path), "eval"), {**names, "name": name}))
    return keys


def test_every_bound_widget_has_its_url_field():
    assert _bound_keys() <= set(url.fields()), sorted(_bound_keys() - set(url.fields()))


def test_the_url_fields_take_the_widgets_ranges():
    """Where a page gives its widget literal bounds, the URL field's are the same."""
    fields = url.fields()
    for path in sorted((ROOT / "app_pages").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and any(k.arg == "bind" for k in node.keywords)):
                continue
            if not ast.unparse(node.func).endswith("number_input") or len(node.args) < 3:
                continue
            key = ast.unparse(next(k.value for k in node.keywords if k.arg == "key"))
            if "'" not in key or "{" in key:
                continue
            name = key.split("'")[1]
            try:
                low, high = (ast.literal_eval(node.args[1]), ast.literal_eval(node.args[2]))
            except ValueError:
                continue
            assert (fields[name].minimum, fields[name].maximum) == (low, high), name


# --- the reader, with generated values at every key --------------------------------------------------------------

HOSTILE = st.one_of(
    st.integers(min_value=10**12 + 1).map(str),
    st.integers(max_value=-1).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e400", " 4", "4 ", "１", "٣", "1_0", "0x10", "", "10^20", "\x00", "4,,2"]),
    st.text(min_size=201, max_size=400),
    st.text(alphabet=st.characters(blacklist_categories=("Nd",)), min_size=1, max_size=20).filter(
        lambda text: text.lower() not in ("true", "false")
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(sorted(url.fields())), value=HOSTILE)
def test_generated_hostile_values_are_refused_at_every_key(key, value):
    field = url.fields()[key]
    refused = refused_values({key: [value]}, {key: field})
    acceptable = field.kind == "text" and len(value) <= field.max_chars and value.isprintable()
    if field is url.LINK_LIST:  # the what-if's link delays (A-B:MS, ...): digits and their marks; the page parses
        acceptable = acceptable and value != "" and all(c in "0123456789 ,:.-" for c in value)
    elif field.pattern is not None:
        acceptable = acceptable and value != "" and value.isascii() and all(c.isalnum() or c in "._-" for c in value)
    if field.kind == "choice":
        acceptable = value in field.choices
    if field.kind in ("ints", "floats"):  # a field's list as typed: blank, or plain numbers in range
        items = [item.strip() for item in value.split(",")]
        plain = all(re.fullmatch(r"[0-9]+" if field.kind == "ints" else r"[0-9]+(\.[0-9]*)?", i) for i in items)
        acceptable = not value.strip() or (
            len(value) <= field.max_chars and plain and all(field.minimum <= float(i) <= field.maximum for i in items)
        )
    assert (key in refused) != acceptable, (key, value, refused)
    if key in refused:
        assert "\n" not in refused[key] and len(refused[key]) < 400


@settings(max_examples=100, deadline=None)
@given(key=st.text(min_size=1, max_size=60).filter(lambda k: k not in url.fields()), value=st.text(max_size=10))
def test_unknown_keys_are_refused(key, value):
    assert refused_values({key: [value]}, url.fields()) == {key: "no page reads this setting"}


def test_a_field_bounds_its_repeats_and_the_link_its_keys():
    assert "at most 1 value" in refused_values({"a": ["1", "2"]}, {"a": UrlField("int", 0, 9)})["a"]
    many = {f"k{i}": ["1"] for i in range(250)}
    refused = refused_values(many, {f"k{i}": UrlField("int", 0, 9) for i in range(250)})
    assert len(refused) == 50 and all("more than 200" in why for why in refused.values())
    assert list(itertools.islice(refused, 1)) == ["k200"]
