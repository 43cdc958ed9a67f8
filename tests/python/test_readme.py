"""The README's numpy example runs as it is and prints what it says."""
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
