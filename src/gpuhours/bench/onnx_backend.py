"""ONNX export, dynamic int8 quantisation and ONNX Runtime sessions for the inference benchmark.

Export (`export_onnx`): torch 2.13 has two exporters. The TorchScript one (`dynamo=False`,
deprecated but shipped) exported seed 003's miniature (examples/hybrid_vision.py) in 0.3-0.5 s
on this project's 2-core VM, the torch.export one (`dynamo=True`, needs onnxscript) in 10.6 s;
but the TorchScript one refuses transformers 5.x decoders (`aten::diff` in the masking code),
which the torch.export one takes. So the TorchScript exporter is tried first and the torch.export
one when it fails; the result names the one used. The batch dimension is exported dynamic, so
one file serves every batch size.

Quantisation (`quantize_int8`): onnxruntime.quantization.quantize_dynamic, int8 weights
(QInt8), activations quantised per call at run time (MatMul/Gemm/Conv -> integer kernels); no
calibration data, no pre-processing pass.

Needs the `inference` extra (onnx, onnxruntime, onnxscript); a clear error says so otherwise.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuhours.errors import FieldError

INSTALL_HINT = "Install it with: pip install 'gpuhours[inference]' (onnx, onnxruntime, onnxscript)."


def require_onnxruntime() -> Any:
    """The onnxruntime module, or a FieldError (of `backends`) saying how to install it."""
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ModuleNotFoundError as e:
        raise FieldError("backends", f"the onnxruntime backends need {e.name}, which is not "
                                     "installed.", INSTALL_HINT) from None
    return onnxruntime


@dataclass(frozen=True)
class Exported:
    path: str
    exporter: str


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """Exporters and the quantiser print progress, tracer warnings and log lines; keep them off
    the user's terminal (and off stdout, where --json goes). What they said is returned, for an
    error message. The root logger's handlers are restored: onnxruntime's quantiser calls
    logging.warning, which would install a handler on the root logger as a side effect."""
    buf = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    # torch's own loggers write through handlers bound to the real stderr at their creation
    loud = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo",
                                           "onnxscript")]
    levels = [g.level for g in loud]
    for g in [root, *loud]:
        g.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf), \
                contextlib.redirect_stderr(buf), _fds_to(buf):
            warnings.simplefilter("ignore")
            yield buf
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for g, lv in zip(loud, levels, strict=True):
            g.setLevel(lv)


@contextlib.contextmanager
def _fds_to(buf: io.StringIO) -> Iterator[None]:
    """File descriptors 1 and 2 into a temporary file whose text is added to `buf`: the
    TorchScript exporter prints its graph from C++ on a failure, past sys.stdout."""
    import sys
    import tempfile

    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            for stream in (sys.__stdout__, sys.__stderr__):
                if stream is not None:
                    stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            buf.write(sink.read().decode(errors="replace"))


def export_onnx(module: Any, inputs: dict[str, Any], output_names: Sequence[str],
                directory: str) -> Exported:
    """Export `module` (called as module(*inputs.values()), in eval mode, on the CPU) to
    `directory`/model.onnx with a dynamic batch dimension (dim 0 of every input and output)."""
    import torch

    path = os.path.join(directory, "model.onnx")
    names = list(inputs)
    args = tuple(inputs.values())
    errors = []
    with _quiet() as said:
        try:
            torch.onnx.export(module, args, path, input_names=names,
                              output_names=list(output_names), dynamo=False,
                              dynamic_axes={n: {0: "batch"} for n in [*names, *output_names]})
            return Exported(path, "torch.onnx.export, TorchScript exporter (dynamo=False)")
        except Exception as e:
            errors.append(f"TorchScript exporter: {type(e).__name__}: {_first_line(e)}")
        try:
            import onnxscript  # noqa: F401
        except ModuleNotFoundError:
            raise FieldError("backends", "ONNX export failed (" + errors[0] + "), and the "
                             "torch.export-based exporter needs onnxscript, which is not "
                             "installed.", INSTALL_HINT) from None
        batch = torch.export.Dim("batch")
        for f in os.listdir(directory):
            os.unlink(os.path.join(directory, f))
        try:
            torch.onnx.export(module, args, path, input_names=names,
                              output_names=list(output_names), dynamo=True,
                              dynamic_shapes=tuple({0: batch} for _ in names))
            return Exported(path, "torch.onnx.export, torch.export-based exporter (dynamo=True)")
        except Exception as e:
            errors.append(f"torch.export exporter: {type(e).__name__}: {_first_line(e)}")
    raise ExportFailed("; ".join(errors) + (f" (exporter output ends: {said.getvalue()[-300:]!r})"
                                            if said.getvalue().strip() else ""))


class ExportFailed(Exception):
    """Neither exporter could export the module: the onnxruntime backends cannot run."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""


def quantize_int8(exported: Exported, directory: str) -> str:
    """The dynamically quantised (int8 weights) copy of an exported model; its path."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = os.path.join(directory, "model.int8.onnx")
    with _quiet():
        quantize_dynamic(exported.path, out, weight_type=QuantType.QInt8)
    return out


def session(path: str, threads: int, cuda: bool = False) -> tuple[Any, str]:
    """An ONNX Runtime session of `path` with `threads` intra-op threads (the same as torch's,
    for a fair comparison), on CUDA when asked and onnxruntime has the provider; (session,
    provider used)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3  # errors only: its warnings would go to the user's terminal
    providers = ["CPUExecutionProvider"]
    if cuda and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    s = ort.InferenceSession(path, sess_options=opts, providers=providers)
    return s, s.get_providers()[0]
