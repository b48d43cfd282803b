"""nnc: an ahead-of-time compiler for neural-network models, with encrypted weights.

Compile an ONNX or TFLite model into an encrypted ``.nnc`` file, load it, and run it on
numpy arrays::

    import numpy as np
    import nnc

    nnc.keygen("model.key", algorithm="sm4")
    summary = nnc.compile("mobilenet_v2.onnx", "mobilenet_v2.nnc",
                          key_file="model.key", encrypt="sm4")
    model = nnc.load("mobilenet_v2.nnc", key_file="model.key")
    (logits,) = model.run({"input": np.zeros((1, 3, 224, 224), np.float32)}).values()

The functions run the ``nnc`` tool's own code in this process: every keyword argument is
the command-line option of the same name (``input_shapes`` is ``--input-shape``,
``devices`` is ``--devices``, a ``True`` flag is the bare option), and a failure raises
the :class:`Error` subclass for the tool's exit status, carrying its message. The ``nnc``
console script installed with the package is the tool itself.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native

__version__: str = _native.__version__

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "CannotWrite",
    "Error",
    "InternalError",
    "LimitExceeded",
    "MalformedInput",
    "MissingInput",
    "Model",
    "Summary",
    "Tensor",
    "UnsupportedModel",
    "UsageError",
    "WrongKey",
    "compile",
    "inspect",
    "keygen",
    "load",
    "verify",
]


class Error(Exception):
    """An nnc failure. ``exit_code`` and ``kind`` are the ``nnc`` tool's exit status and
    error kind for it (docs/CLI.md); ``message`` and ``causes`` what it says."""

    exit_code: int = 1
    kind: str = "failure"

    def __init__(self, message: str, causes: Sequence[str] = (), exit_code: Optional[int] = None,
                 kind: Optional[str] = None) -> None:
        self.message = message
        self.causes = list(causes)
        if exit_code is not None:
            self.exit_code = exit_code
        if kind is not None:
            self.kind = kind
        text = message + "".join(f"\n  caused by: {c}" for c in self.causes)
        super().__init__(text)


class UsageError(Error, ValueError):
    """Bad options: unknown or conflicting keyword arguments, a missing key (exit 2)."""

    exit_code = 2
    kind = "usage"


class WrongKey(Error):
    """The file does not authenticate: a wrong key, or a file altered or truncated
    (authenticated encryption cannot tell the two apart; exit 3)."""

    exit_code = 3
    kind = "integrity"


class LimitExceeded(Error, MemoryError):
    """The input needs more memory than a resource limit allows (exit 4)."""

    exit_code = 4
    kind = "limit"


class MalformedInput(Error, ValueError):
    """A model, ``.nnc`` file, tensor or device profile is malformed (exit 65)."""

    exit_code = 65
    kind = "malformed-input"


class MissingInput(Error, FileNotFoundError):
    """An input file does not exist or cannot be read (exit 66)."""

    exit_code = 66
    kind = "missing-input"


class UnsupportedModel(Error):
    """The model uses something nnc cannot compile or run; the message lists it all
    (exit 69)."""

    exit_code = 69
    kind = "unsupported"


class InternalError(Error):
    """A bug in nnc; the message says where (exit 70)."""

    exit_code = 70
    kind = "internal"


class CannotWrite(Error, OSError):
    """An output cannot be written (exit 73)."""

    exit_code = 73
    kind = "cannot-write"


_BY_KIND = {cls.kind: cls for cls in (UsageError, WrongKey, LimitExceeded, MalformedInput,
                                      MissingInput, UnsupportedModel, InternalError,
                                      CannotWrite)}


def _error(kind: str, exit_code: int, message: str, causes: Sequence[str]) -> Error:
    cls = _BY_KIND.get(kind, Error)
    return cls(message, causes, exit_code=exit_code, kind=kind)


def _raise_native(e: "_native.NativeError") -> None:
    kind, exit_code, message, causes = e.args
    raise _error(kind, exit_code, message, causes) from None


class Summary(dict):
    """A command's JSON report (``nnc compile --json`` and the like) as a dict whose keys
    are also attributes: ``summary.operations``, ``summary["weight_bytes"]``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return Summary({k: _wrap(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


def _key_text(key: Union[str, bytes, None]) -> Optional[str]:
    """A key given in memory: bytes are the raw key, text is hex or a PEM private key."""
    if key is None:
        return None
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key).hex()
    if isinstance(key, str):
        return key
    raise TypeError(f"key must be bytes (the raw key) or str (hex or PEM), not {type(key).__name__}")


# Keyword arguments whose option is named differently (plural Python names for
# repeatable options).
_OPTION_NAMES = {
    "input_shapes": "input-shape",
    "bind_inputs": "bind-input",
    "recipients": "recipient",
    "keep_float": "keep-float",
    "limits": "limit",
    "input_preprocess": "input-preprocess",
    "trust": "trust",
}


def _options(kwargs: Mapping[str, Any]) -> List[str]:
    """Keyword arguments as command-line options: ``name_x=v`` is ``--name-x v``, True is
    the bare flag, False and None leave it out, a list or tuple repeats it, a mapping
    gives ``--option KEY=VALUE`` per item (a sequence value joined by ``x``, as in
    ``--input-shape x=1x3x224x224``)."""
    argv: List[str] = []
    for name, value in kwargs.items():
        if value is None or value is False:
            continue
        flag = "--" + _OPTION_NAMES.get(name, name.replace("_", "-"))
        if value is True:
            argv.append(flag)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                if isinstance(v, (list, tuple)):
                    v = "x".join(str(int(d)) for d in v)
                argv += [flag, f"{k}={os.fspath(v) if isinstance(v, os.PathLike) else v}"]
        elif isinstance(value, (list, tuple)):
            for v in value:
                argv += [flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
        else:
            argv += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return argv


def _run_json(argv: List[str], key: Union[str, bytes, None] = None) -> Summary:
    """Runs ``nnc ARGV --json`` in process and returns its report, or raises."""
    status, out = _native.run_command(["nnc", *argv, "--json"], _key_text(key))
    try:
        report = json.loads(out) if out.strip() else {}
    except ValueError:
        raise InternalError(f"nnc {argv[0]} printed something other than JSON: {out[:200]!r}")
    if status != 0:
        if report.get("schema") == "nnc.error/1":
            raise _error(report["kind"], report["exit_code"], report["message"],
                         report.get("causes", []))
        raise _error("failure", status, f"nnc {argv[0]} failed (exit {status})", [])
    return _wrap(report)


def compile(source: PathLike, output: PathLike, *, key_file: Optional[PathLike] = None,
            key: Union[str, bytes, None] = None, encrypt: Optional[str] = None, mode: str = "ctr",
            devices: Iterable[PathLike] = (), cache_dir: Optional[PathLike] = None,
            input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
            quantize: Optional[str] = None, calibration: Optional[PathLike] = None,
            **options: Any) -> Summary:
    """Compiles ``source`` (.onnx or .tflite) into the encrypted ``output`` .nnc file, as
    ``nnc compile`` does, and returns its summary (the fields of ``nnc compile --json``:
    ``operations``, ``weight_bytes``, ``encryption``, ``plan``, ``cache``, ...).

    ``key_file`` names a key file (``keygen``); ``key`` gives the key in memory instead
    (bytes: the raw key; str: hex). Every other ``nnc compile`` option is a keyword
    argument: ``recipients=[...]``, ``sign=``, ``reproducible=True``,
    ``bind_inputs={"k": "k.npy"}``, ``calibration_method="mse"``, ``keep_float=[...]``,
    ``limits={"arena": "2GiB"}``, ``partition="strict"`` and so on.
    """
    argv = ["compile", os.fspath(source), "--output", os.fspath(output)]
    argv += _options(dict(key_file=key_file, encrypt=encrypt, mode=mode, devices=list(devices),
                          cache_dir=cache_dir, input_shapes=input_shapes, quantize=quantize,
                          calibration=calibration, **options))
    return _run_json(argv, key)


def inspect(path: PathLike, *, key_file: Optional[PathLike] = None,
            key: Union[str, bytes, None] = None, **options: Any) -> Summary:
    """Describes a source model or a compiled .nnc (``nnc inspect --json``): inputs,
    outputs, operations, and for a .nnc its format, cipher and placement."""
    argv = ["inspect", os.fspath(path)] + _options(dict(key_file=key_file, **options))
    return _run_json(argv, key)


def verify(path: PathLike, *, key_file: Optional[PathLike] = None,
           key: Union[str, bytes, None] = None, trust: Iterable[PathLike] = (),
           **options: Any) -> Summary:
    """Checks a .nnc file's structure and authenticity (``nnc verify --json``); raises
    :class:`WrongKey` when it does not authenticate with the key or a trusted signer."""
    argv = ["verify", os.fspath(path)] + _options(dict(key_file=key_file, trust=list(trust),
                                                        **options))
    return _run_json(argv, key)


def keygen(output: PathLike, *, algorithm: str = "aes128", **options: Any) -> Summary:
    """Writes a new random key (``nnc keygen``): a symmetric key in hex (aes128, aes192,
    aes256, sm4), or a key pair (x25519, sm2 for devices; ed25519, ecdsa-p256 for
    signing: OUTPUT and OUTPUT.pub)."""
    argv = ["keygen", "--output", os.fspath(output), "--algorithm", algorithm]
    return _run_json(argv + _options(options))


class Tensor:
    """An input or output of a model: ``name``, numpy ``dtype`` name and ``shape`` (-1 for
    a dimension known only at run time)."""

    __slots__ = ("name", "dtype", "shape")

    def __init__(self, name: str, dtype: str, shape: Sequence[int]) -> None:
        self.name = name
        self.dtype = dtype
        self.shape: Tuple[int, ...] = tuple(shape)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.dtype}, {list(self.shape)})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Tensor) and (self.name, self.dtype, self.shape)
                == (other.name, other.dtype, other.shape))


class Model:
    """A compiled model, loaded, authenticated and prepared (see :func:`load`). ``run``
    may be called from several threads at once."""

    def __init__(self, native: "_native.NativeModel", path: str) -> None:
        self._native = native
        self.path = path
        self.inputs: List[Tensor] = [Tensor(*t) for t in native.inputs()]
        self.outputs: List[Tensor] = [Tensor(*t) for t in native.outputs()]

    def __repr__(self) -> str:
        return (f"<nnc.Model {self.path!r} ({self._native.summary()}): "
                f"inputs {self.inputs}, outputs {self.outputs}>")

    def run(self, inputs: Union[Mapping[str, Any], Sequence[Any]]) -> Dict[str, Any]:
        """Runs the model. ``inputs`` maps each input's name to an array (or lists them in
        input order); returns ``{output name: numpy.ndarray}`` in output order. Arrays of
        the input's dtype that are C-contiguous are read where they lie (not copied);
        others are converted first, float64 to float32 for a float32 input. The GIL is
        released while the model runs."""
        import numpy as np

        if isinstance(inputs, Mapping):
            names = [t.name for t in self.inputs]
            unknown = [k for k in inputs if k not in names]
            missing = [n for n in names if n not in inputs]
            if unknown or missing:
                raise UsageError(
                    "the inputs given do not match the model's: "
                    + (f"no input named {', '.join(map(repr, unknown))}; " if unknown else "")
                    + (f"missing {', '.join(map(repr, missing))}; " if missing else "")
                    + f"the model takes {', '.join(map(repr, names))}")
            ordered = [inputs[n] for n in names]
        else:
            ordered = list(inputs)
            if len(ordered) != len(self.inputs):
                raise UsageError(f"the model takes {len(self.inputs)} input(s), "
                                 f"{len(ordered)} given")
        arrays = []
        for spec, value in zip(self.inputs, ordered):
            array = np.asarray(value)
            # float32 data also serves bfloat16 and float8 inputs (rounded to them).
            if array.dtype == np.float64 and (spec.dtype == "float32"
                                              or spec.dtype in _NARROW_FLOATS):
                array = array.astype(np.float32)
            arrays.append(np.ascontiguousarray(array))
        try:
            results = self._native.run(arrays)
        except _native.NativeError as e:
            _raise_native(e)
        return {name: np.frombuffer(data, dtype=_numpy_dtype(dtype)).reshape(shape)
                for name, dtype, shape, data in results}


# The narrow types nnc computes in wider ones; NumPy knows them through `ml_dtypes`.
_NARROW_FLOATS = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                  "float8_e5m2fnuz", "float4_e2m1fn")


def _numpy_dtype(name: str) -> Any:
    """The NumPy dtype of an output's element type; bfloat16, float8, float4 and the
    4- and 2-bit integers come from `ml_dtypes` (the package JAX and ONNX use)."""
    import numpy as np  # noqa: PLC0415 (numpy is imported where it is used)

    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes  # noqa: PLC0415 (only models with such outputs need it)
    except ImportError:
        raise UnsupportedModel(
            f"the model has a {name} output, which NumPy represents only with the "
            "ml_dtypes package: pip install ml_dtypes") from None
    return np.dtype(getattr(ml_dtypes, name))


def load(path: PathLike, *, key_file: Optional[PathLike] = None,
         key: Union[str, bytes, None] = None, cache_dir: Optional[PathLike] = None,
         threads: int = 1, **options: Any) -> Model:
    """Loads, authenticates and prepares a compiled .nnc (or compiles an .onnx/.tflite
    in memory, unencrypted), as ``nnc run`` does. ``key_file`` is the key file (or a
    device's PEM private key), ``key`` the key in memory (bytes: raw; str: hex or PEM);
    ``cache_dir`` a compilation cache to prepare from or fill; other ``nnc run``
    options (``trust=[...]``, ``float_math="fast"``, ``limits={...}``) as keywords."""
    path = os.fspath(path)
    argv = ["nnc", "run", path] + _options(dict(key_file=key_file, cache_dir=cache_dir,
                                                  threads=threads, **options))
    try:
        native = _native.load(argv, _key_text(key))
    except _native.NativeError as e:
        _raise_native(e)
    return Model(native, path)


def main() -> int:
    """The ``nnc`` console script: the whole tool, on ``sys.argv``."""
    return _native.main(["nnc", *sys.argv[1:]])
