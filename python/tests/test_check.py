"""espalier.check: `espalier check` from Python, with its flags, its records as the CLI's
--json writes them, its table on the `espalier` logger, and its errors as ValueError."""

import json
import logging
import subprocess

import pytest

import espalier


def test_the_cpu_is_refused_as_the_reference():
    with pytest.raises(ValueError, match="the CPU is the reference"):
        espalier.check(device="cpu")


def test_bad_flags_are_value_errors_that_name_them():
    with pytest.raises(ValueError, match="unknown check group `kernels`"):
        espalier.check(only=["kernels"])
    with pytest.raises(ValueError, match="cannot be used with"):
        espalier.check(quick=True, full=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'json'"):
        espalier.check(json="out.json")


def test_wgpu_records_are_the_clis(cli, tmp_path, caplog):
    adapters = espalier.devices()["wgpu"]
    if not adapters["adapters"]:
        pytest.skip(f"no wgpu adapter: {adapters['unavailable']}")
    with caplog.at_level(logging.INFO, logger="espalier"):
        report = espalier.check(device="wgpu", quick=True, only=["transfers"])
    assert report["finished"] and report["failed"] == 0
    assert report["passed"] == len(report["records"]) >= 2
    # The first record says the device opened; the rest are the group asked for.
    assert report["records"][0]["name"] == "device opens"
    assert {r["group"] for r in report["records"][1:]} == {"transfers"}
    path = tmp_path / "check.json"
    subprocess.run([cli, "check", "--quick", "--device", "wgpu", "--only", "transfers",
                    "--json", str(path)], check=True, capture_output=True)
    from_cli = json.loads(path.read_text())
    assert [r["name"] for r in report["records"]] == [r["name"] for r in from_cli["records"]]
    assert report["devices"] == from_cli["devices"]
    lines = [r.getMessage() for r in caplog.records if r.name == "espalier"]
    assert any(l.startswith("  pass   transfers") for l in lines), lines
