"""The Python guide's example runs as written and gives what it says."""

import pathlib
import re

import numpy as np

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide" / "python.md"


def test_the_guide_example_trains_and_returns_embeddings():
    text = GUIDE.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    scope = {}
    exec(compile(code, "docs/guide/python.md", "exec"), scope)
    emb, run = scope["emb"], scope["run"]
    assert emb.shape == (1000, 64) and emb.dtype == np.float32
    assert len(run.history) == 20
    assert all(e["micro_batches"] >= 4 for e in run.history)
