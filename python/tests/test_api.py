"""The public API is documented and typed: every public name has a docstring, the stubs
declare exactly the public names, and the stubs' keyword arguments and defaults are the
command line's flags and defaults (one source of truth)."""

import ast
import pathlib

import pytest

import espalier
from espalier import _espalier

STUB = pathlib.Path(espalier.__file__).with_name("_espalier.pyi")


def stub():
    return ast.parse(STUB.read_text())


def stub_function(name):
    return next(n for n in stub().body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_every_public_name_has_a_docstring():
    assert espalier.__doc__
    for name in espalier.__all__:
        if name == "__version__":
            continue
        obj = getattr(espalier, name)
        assert obj.__doc__ and obj.__doc__.strip(), name
        if isinstance(obj, type):
            for attr, value in vars(obj).items():
                if not attr.startswith("_"):
                    assert value.__doc__ and value.__doc__.strip(), f"{name}.{attr}"


def test_the_stub_declares_the_public_names_and_their_members():
    tree = stub()
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    declared |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign)
                 for t in [n.target] if isinstance(t, ast.Name)}
    assert declared - {"_ArrayLike"} >= set(espalier.__all__)
    for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
        members = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
        runtime = {a for a in vars(getattr(espalier, cls.name)) if not a.startswith("_")}
        assert {m for m in members if not m.startswith("_")} == runtime, cls.name
        for n in cls.body:
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_"):
                assert ast.get_docstring(n), f"{cls.name}.{n.name}"


def literal(node):
    value = ast.literal_eval(node)
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


@pytest.mark.parametrize("command,own", [("train", {"dataset", "on_epoch"}),
                                         ("partition", {"dataset", "seeds", "k", "measure"}),
                                         ("check", set())])
def test_stub_keyword_arguments_are_the_cli_flags_with_their_defaults(command, own):
    fn = stub_function(command)
    args = fn.args.args + fn.args.kwonlyargs
    defaults = dict(zip([a.arg for a in fn.args.kwonlyargs], fn.args.kw_defaults))
    flags = _espalier._flag_defaults(command)
    assert {a.arg for a in args} - own == set(flags)
    for name, cli_default in flags.items():
        mine = literal(defaults[name])
        if cli_default is None or mine is None:
            assert mine == cli_default, name
        elif isinstance(mine, (int, float)) and not isinstance(mine, bool):
            assert float(mine) == float(cli_default), name
        else:
            assert mine == cli_default, name


def test_devices_lists_the_cpu():
    d = espalier.devices()
    assert d["cpu"]["available"] and d["cpu"]["threads"] >= 1
    assert set(d) == {"cpu", "wgpu", "cuda"}
