"""The nnc Python package, as installed from its wheel: compile, load, run, inspect,
verify, errors, and the console script."""

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import threading

import numpy as np
import pytest

import nnc


def within_largest(actual: np.ndarray, expected: np.ndarray, tolerance: float = 1e-4) -> float:
    """The largest difference as a fraction of the largest expected magnitude."""
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


@pytest.fixture(scope="module")
def sm4_model(tmp_path_factory, models):
    """MobileNetV2 (ONNX) compiled with an SM4 key."""
    d = tmp_path_factory.mktemp("sm4")
    key = d / "model.key"
    nnc.keygen(key, algorithm="sm4")
    out = d / "mobilenet_v2.nnc"
    # No encrypt=: the key file records that it is an SM4 key.
    summary = nnc.compile(models / "mobilenet_v2.onnx", out, key_file=key)
    return key, out, summary


def test_installed_from_the_wheel_not_the_source_tree():
    site = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
    assert pathlib.Path(nnc.__file__).resolve().is_relative_to(site)


def test_compile_load_run_matches_onnx_runtime(sm4_model, models):
    key, out, summary = sm4_model
    assert summary.encryption.algorithm == "sm4"
    assert summary.encryption.mode == "ctr"
    assert summary["operations"] == summary.operations > 50
    assert out.stat().st_size == summary.bytes
    model = nnc.load(out, key_file=key)
    assert model.inputs == [nnc.Tensor("input", "float32", [1, 3, 224, 224])]
    assert [o.name for o in model.outputs] == ["output"]
    x = np.load(models / "mobilenet_v2.onnx.input.npy")
    expected = np.load(models / "mobilenet_v2.onnx.output.npy")
    outputs = model.run({"input": x})
    assert list(outputs) == ["output"]
    y = outputs["output"]
    assert y.dtype == np.float32 and y.shape == expected.shape
    # Within 1e-4 of the largest output of ONNX Runtime's (the reference's engine).
    assert within_largest(y, expected) <= 1e-4
    y[0, 0] = 1.0  # outputs are ordinary writable arrays


def test_key_in_memory_and_inputs_by_position(sm4_model, models):
    key, out, _ = sm4_model
    # The key file: the cipher it was made for, then the key in hex.
    first, hex_key = key.read_text().splitlines()
    assert first == "# nnc key: sm4"
    x = np.load(models / "mobilenet_v2.onnx.input.npy")
    a = nnc.load(out, key=bytes.fromhex(hex_key)).run([x])["output"]
    b = nnc.load(out, key=hex_key).run({"input": x})["output"]
    np.testing.assert_array_equal(a, b)


def test_converted_inputs_give_the_same_result(sm4_model, models):
    key, out, _ = sm4_model
    model = nnc.load(out, key_file=key)
    x = np.load(models / "mobilenet_v2.onnx.input.npy")
    reference = model.run({"input": x})["output"]
    # A non-contiguous view and a float64 array are converted before running.
    strided = np.ascontiguousarray(np.swapaxes(x, 2, 3)).swapaxes(2, 3)
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(model.run({"input": strided})["output"], reference)
    np.testing.assert_array_equal(model.run({"input": x.astype(np.float64)})["output"],
                                  reference)


def test_concurrent_runs_agree(sm4_model, models):
    key, out, _ = sm4_model
    model = nnc.load(out, key_file=key)
    x = np.load(models / "mobilenet_v2.onnx.input.npy")
    reference = model.run({"input": x})["output"]
    results = [None, None]

    def work(k):
        results[k] = model.run({"input": x})["output"]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, reference)


def test_wrong_key_raises_wrong_key(sm4_model, tmp_path):
    _, out, _ = sm4_model
    other = tmp_path / "other.key"
    nnc.keygen(other, algorithm="sm4")
    with pytest.raises(nnc.WrongKey) as info:
        nnc.load(out, key_file=other)
    assert info.value.exit_code == 3
    assert "wrong key or tampered file" in str(info.value)
    with pytest.raises(nnc.WrongKey):
        nnc.verify(out, key_file=other)


def test_tampered_file_raises_wrong_key(sm4_model, tmp_path):
    key, out, _ = sm4_model
    bad = tmp_path / "tampered.nnc"
    data = bytearray(out.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad.write_bytes(bytes(data))
    with pytest.raises(nnc.WrongKey):
        nnc.load(bad, key_file=key).run({"input": np.zeros((1, 3, 224, 224), np.float32)})


def test_inspect_and_verify(sm4_model, models):
    key, out, _ = sm4_model
    report = nnc.inspect(models / "mobilenet_v2.onnx")
    assert report["inputs"][0]["name"] == "input"
    verified = nnc.verify(out, key_file=key)
    assert verified["ok"] is True


def test_errors_carry_the_tools_exit_status(tmp_path, models):
    with pytest.raises(nnc.MissingInput) as info:
        nnc.compile(tmp_path / "absent.onnx", tmp_path / "x.nnc", encrypt="none")
    assert info.value.exit_code == 66
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(nnc.UsageError) as info:
        nnc.compile(models / "mobilenet_v2.onnx", tmp_path / "x.nnc", no_such_option=3)
    assert "--no-such-option" in str(info.value)
    with pytest.raises(nnc.UsageError):
        nnc.compile(models / "mobilenet_v2.onnx", tmp_path / "x.nnc")  # no key
    assert not (tmp_path / "x.nnc").exists()
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff" * 64)
    with pytest.raises(nnc.MalformedInput):
        nnc.compile(junk, tmp_path / "x.nnc", encrypt="none")


def test_wrong_inputs_are_named(sm4_model):
    key, out, _ = sm4_model
    model = nnc.load(out, key_file=key)
    with pytest.raises(nnc.UsageError, match="no input named 'x'"):
        model.run({"x": np.zeros((1, 3, 224, 224), np.float32)})
    with pytest.raises(nnc.MalformedInput):
        model.run({"input": np.zeros((1, 3, 8, 8), np.float32)})


def test_console_script_prints_its_version():
    script = shutil.which("nnc", path=os.path.dirname(sys.executable))
    assert script, "the wheel installs an nnc console script beside the interpreter"
    result = subprocess.run([script, "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.strip() == f"nnc {nnc.__version__}"
    result = subprocess.run([script, "inspect", "/nonexistent.onnx"], capture_output=True,
                            text=True)
    assert result.returncode == 66
    assert "error:" in result.stderr
