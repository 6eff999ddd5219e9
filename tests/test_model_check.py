"""A user's model is never imported or called by the launcher's own process.

From the command line (`python -m executor run --model ...`) and from the Run page (AppTest), each of the issue's
names: `sys:exit` and `builtins:quit` (once exit 0 with no output), `os:abort` (once killed the web server),
`http.server:test` (once served on port 8000 from the web server's process), and factories that raise
KeyboardInterrupt or SystemExit (once a traceback) or return nothing usable. Each is one line, exit 2, never a
hang; the page refuses any factory outside the places it was started to accept, and checks the others in a
child process, so the server never imports them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pipesim_executor import processes
from pipesim_executor.host import cli, phase
from pipesim_executor.host.model_check import APP_MODELS_ENV, TIMEOUT_ENV, app_model_sources, check_app_model

SUBMIT = "FormSubmitter:run-form-Launch run"
HELPERS = "tests.helpers.custom_models"
HANG_TIMEOUT_S = "4"  # the check's limit for the factories that never return (the others keep the default)

# name -> what the one line must say
CLI_NAMES = {
    "sys:exit": "tried to end the process (SystemExit None)",
    "builtins:quit": "tried to end the process (SystemExit None)",
    "os:abort": "killed by SIGABRT before the factory returned",
    "http.server:test": "model http.server:test:",  # no answer in time, or the port is taken: either is refused
    f"{HELPERS}:interrupts": "the factory raised KeyboardInterrupt",
    f"{HELPERS}:exits": "tried to end the process (SystemExit 0)",
    f"{HELPERS}:exits_hard": "exited with status 0 before the factory returned",
    f"{HELPERS}:returns_none": "must return (layers, make_batch, loss_fn)",
}


def _spy(started: list):
    """Popen that lets the model check's own child run, and records any other start (torchrun) while running a
    process that does nothing in its place."""
    real = subprocess.Popen

    def spy(argv, *args, **kwargs):
        if "pipesim_executor.custom_model" in argv:
            return real(argv, *args, **kwargs)
        started.append(argv)
        return real([processes.sys.executable, "-c", "pass"], *args, **kwargs)

    return spy


@pytest.mark.parametrize("name", sorted(CLI_NAMES))
def test_the_cli_reports_every_factory_that_does_not_return_a_model(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if name == "http.server:test":
        monkeypatch.setenv(TIMEOUT_ENV, HANG_TIMEOUT_S)
    started: list = []
    monkeypatch.setattr(phase.subprocess, "Popen", _spy(started))
    assert cli.main(["run", "--device", "cpu", "--model", name]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"python -m executor: error: model {name}") and err.count("\n") == 1 and "Traceback" not in err
    ), err
    assert CLI_NAMES[name] in err, err
    assert started == [] and list(tmp_path.iterdir()) == []  # nothing ran, no folder made
    assert "http.server" not in name or "gave no answer" in err or "Address already in use" in err


def test_a_real_process_says_it_in_one_line_and_exits_2(tmp_path):
    done = subprocess.run(
        [processes.sys.executable, "-m", "executor", "run", "--device", "cpu", "--model", "builtins:quit"],
        cwd=processes.REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "SystemExit" in done.stderr
    assert done.stdout == ""


# --- the page's opt-in ------------------------------------------------------------------------------------------


def test_the_page_accepts_examples_and_what_it_was_started_with(tmp_path):
    (tmp_path / "mymodels" / "sub").mkdir(parents=True)
    env = {APP_MODELS_ENV: "lab.models, mymodels/sub"}
    sources = app_model_sources(env, cwd=tmp_path)
    assert sources == ("pipesim_examples", "examples", "lab.models", "mymodels.sub")  # examples: the checkout's
    check_app_model("examples.gpt_small:build", sources)
    check_app_model("pipesim_examples.gpt_small:build", sources)
    check_app_model("lab.models.big:build", sources)
    check_app_model("mymodels.sub.x:build", sources)
    for spec in ("lab.modelsx:build", "mymodels.x:build", "os:abort", "examplesx:build"):
        with pytest.raises(ValueError, match=f"{APP_MODELS_ENV}=.* streamlit run app.py"):
            check_app_model(spec, sources)
    for bad in ("../elsewhere", "/etc", "a b"):
        with pytest.raises(ValueError, match=APP_MODELS_ENV):
            app_model_sources({APP_MODELS_ENV: bad}, cwd=tmp_path)


@pytest.fixture
def run_page(open_page, tmp_path, monkeypatch):
    log = tmp_path / "imports.log"
    monkeypatch.setenv("PIPESIM_TEST_IMPORT_LOG", str(log))
    started: list = []
    monkeypatch.setattr(phase.subprocess, "Popen", _spy(started))

    def launch_with(spec: str):
        app = open_page("run")
        app.selectbox(key="run-device").set_value("cpu")
        app.text_input(key="run-model-spec").set_value(spec)
        app.button(key=SUBMIT).click().run(timeout=300)
        assert not app.exception, app.exception
        return app

    launch_with.log, launch_with.started = log, started
    return launch_with


@pytest.mark.parametrize("name", ["os:abort", "sys:exit", "builtins:quit", "http.server:test", f"{HELPERS}:exits"])
def test_the_page_refuses_a_factory_from_elsewhere_without_importing_it(run_page, name):
    app = run_page(name)
    assert any("this app takes factories only from pipesim_examples, examples" in e.value for e in app.error)
    assert any(f"{APP_MODELS_ENV}=" in e.value for e in app.error)
    assert run_page.started == [] and not run_page.log.exists()


PAGE_NAMES = {
    "tests.helpers.page_models:interrupts": "the factory raised KeyboardInterrupt",
    "tests.helpers.page_models:exits": "tried to end the process (SystemExit 3)",
    "tests.helpers.page_models:aborts": "killed by SIGABRT",
    "tests.helpers.page_models:returns_none": "must return (layers, make_batch, loss_fn)",
    "tests.helpers.page_models:serves_forever": "gave no answer within",
}


@pytest.mark.parametrize("name", sorted(PAGE_NAMES))
def test_an_accepted_factory_is_checked_in_a_child_never_in_the_server(run_page, monkeypatch, name):
    monkeypatch.setenv(APP_MODELS_ENV, "tests.helpers.page_models")
    if name.endswith("serves_forever"):
        monkeypatch.setenv(TIMEOUT_ENV, HANG_TIMEOUT_S)
    app = run_page(name)
    assert any(PAGE_NAMES[name] in e.value for e in app.error), [e.value for e in app.error]
    assert run_page.started == []  # refused before torchrun
    importers = {int(line) for line in Path(run_page.log).read_text().split()}
    assert importers and os.getpid() not in importers  # imported by the check's child, never by the server


def test_an_accepted_good_factory_passes_the_check_and_launches(run_page):
    """The check passes in its child and torchrun is started (here a stand-in that starts nothing)."""
    app = run_page("examples.gpt_small:build_tiny")
    assert not any("model examples" in e.value for e in app.error), [e.value for e in app.error]
    assert len(run_page.started) == 1 and "torch.distributed.run" in run_page.started[0]
