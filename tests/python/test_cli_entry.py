"""`kvcompress` on PATH / `python -m kvcompress`: the console entry point runs
the C command-line tool (issue 20: a pip install puts the command on PATH)."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT


def _cli():
    exe = os.environ.get("KVCOMPRESS_CLI") or os.path.join(ROOT, "build", "tools", "kvcompress")
    if not os.path.isfile(exe):
        pytest.skip("the C command-line tool is not built here")
    return exe


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.update(extra)
    return env


def test_python_m_kvcompress_runs_the_cli():
    r = subprocess.run([sys.executable, "-m", "kvcompress", "--version"], capture_output=True, text=True,
                       env=_env(KVCOMPRESS_CLI=_cli()))
    assert r.returncode == 0 and r.stdout.startswith("kvcompress "), r.stderr


def test_arguments_and_exit_status_pass_through():
    r = subprocess.run([sys.executable, "-m", "kvcompress", "bench", "--threads", "abc"], capture_output=True,
                       text=True, env=_env(KVCOMPRESS_CLI=_cli()))
    assert r.returncode == 2 and "--threads abc" in r.stderr


def test_console_script_is_declared():
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert 'kvcompress = "kvcompress.__main__:main"' in text


def test_missing_tool_is_a_clear_error(monkeypatch, capsys):
    import kvcompress.__main__ as m
    monkeypatch.setattr(m, "_find", lambda: iter(()))
    assert m.main(["info"]) == 2
    assert "command-line tool is not installed" in capsys.readouterr().err
