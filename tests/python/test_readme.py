"""The README's numpy examples run as they are and print what they say."""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(os.path.dirname(HERE)), "README.md")


def test_readme_numpy_example_runs(capsys):
    text = open(README).read()
    m = re.search(r"<!-- example: numpy -->\s*```python\n(.*?)```", text, re.S)
    assert m, "the README lost its numpy example"
    exec(compile(m.group(1), "README.md (numpy example)", "exec"), {})
    out = capsys.readouterr().out
    assert "'outputs_written': 64" in out and "'outputs_nonfinite': 0" in out
    assert re.search(r"\[(\s*\d+){8}\s*\]", out), out  # slot 0's 8 scale bytes


def test_readme_indexer_example_runs(capsys):
    text = open(README).read()
    m = re.search(r"<!-- example: indexer -->\s*```python\n(.*?)```", text, re.S)
    assert m, "the README lost its indexer example"
    exec(compile(m.group(1), "README.md (indexer example)", "exec"), {})
    out = capsys.readouterr().out
    assert "bfloat16 (256, 4, 512)" in out and "(256, 68)" in out, out
