"""Runs pyg_peer.py (beside this file) with the wheels of wheels/ behind the packages
this python already has: a machine with PyTorch but without torch_geometric (or without
what it imports) gets them from the bundle, and what is installed wins.

    python3 pyg.py --probe          # exit 0 when torch and torch_geometric import
    python3 pyg.py ARGS...          # pyg_peer.py ARGS...

The wheels are unpacked once into $ESPALIER_PYLIB (default: pylib/ beside this file, or a
temporary folder when that is not writable). Only wheels for this interpreter are used:
pure-Python ones, abi3 ones, and those tagged with this CPython version."""
import os
import runpy
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def usable(name):
    """Whether a wheel's tags fit this interpreter (Linux x86_64 or pure Python)."""
    parts = name[:-4].split("-")
    if len(parts) < 5:
        return False
    py, abi, plat = parts[-3], parts[-2], parts[-1]
    cp = "cp%d%d" % sys.version_info[:2]
    if plat == "any":
        return True
    if "x86_64" not in plat or not sys.platform.startswith("linux"):
        return False
    return abi == "abi3" or cp in py.split(".")


def unpack():
    wheels = os.path.join(HERE, "wheels")
    names = sorted(n for n in os.listdir(wheels) if n.endswith(".whl")) if os.path.isdir(wheels) else []
    if not names:
        return None
    lib = os.environ.get("ESPALIER_PYLIB") or os.path.join(HERE, "pylib")
    try:
        os.makedirs(lib, exist_ok=True)
        probe = os.path.join(lib, ".write-test")
        open(probe, "w").close()
        os.remove(probe)
    except OSError:
        lib = tempfile.mkdtemp(prefix="espalier-pylib-")
    for n in names:
        if usable(n):
            mark = os.path.join(lib, "." + n)
            if not os.path.exists(mark):
                with zipfile.ZipFile(os.path.join(wheels, n)) as z:
                    z.extractall(lib)
                open(mark, "w").close()
    return lib


def main():
    lib = unpack()
    if lib:
        sys.path.append(lib)
    if sys.argv[1:] == ["--probe"]:
        try:
            import torch  # noqa: F401
            import torch_geometric  # noqa: F401
        except Exception as e:  # any import failure means the phase cannot run
            print("cannot import torch and torch_geometric: %s: %s" % (type(e).__name__, e))
            return 1
        cuda = torch.cuda.is_available()
        print("torch %s, torch_geometric %s, cuda %s%s" % (
            torch.__version__, torch_geometric.__version__, cuda,
            " (%s)" % torch.cuda.get_device_name(0) if cuda else ""))
        return 0
    script = os.path.join(HERE, "pyg_peer.py")
    sys.argv = [script] + sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
