"""The README's Python example runs as written and gives what it says."""

import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_example_trains_and_returns_embeddings():
    text = README.read_text()
    section = text[text.index("## From Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    emb, run = scope["emb"], scope["run"]
    assert emb.shape == (1000, 64) and emb.dtype == np.float32
    assert len(run.history) == 20
    assert all(e["micro_batches"] >= 4 for e in run.history)
