"""The README's numpy examples run as they are and print what they say."""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(os.path.dirname(HERE)), "README.md")


def _run_example(name, capsys):
    """The README's example block marked `<!-- example: name -->`, run; @return what it printed."""
    text = open(README).read()
    m = re.search(r"<!-- example: " + name + r" -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"the README lost its {name} example"
    exec(compile(m.group(1), f"README.md ({name} example)", "exec"), {})
    return capsys.readouterr().out


def test_readme_numpy_example_runs(capsys):
    out = _run_example("numpy", capsys)
    assert "'outputs_written': 64" in out and "'outputs_nonfinite': 0" in out
    assert re.search(r"\[(\s*\d+){8}\s*\]", out), out  # slot 0's 8 scale bytes


def test_readme_indexer_example_runs(capsys):
    out = _run_example("indexer", capsys)
    assert "bfloat16 (256, 4, 512)" in out and "(256, 68)" in out, out
