#!/usr/bin/env python3
"""Reference outputs of real models from public packages, from ONNX Runtime.

Streaming cases:

For each model that `scripts/fetch-models` extracts (silero-vad's published models and
the silero-vad copy openWakeWord ships, all with ONNX `If`), this runs ONNX Runtime over
consecutive chunks of a deterministic test signal, feeding the state outputs back as the
next chunk's state inputs, and writes to testdata/packaged/CASE/:

  chunks.npy       [steps, 1, chunk] float32, the chunks in order
  output_K.npy     [steps, ...] every output K of every step, stacked

The test signal mixes voiced-like harmonic bursts with silence and noise, so that the
detectors' probabilities move over the run. Tests (cli/tests/streaming.rs) run `nnc run
--stream ... --feed-back ...` on the same chunks and compare.

Usage: scripts/gen_stream_references.py   (needs numpy and onnxruntime)
"""

import os

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTERNAL = os.path.join(ROOT, "testdata", "external")
OUT = os.path.join(ROOT, "testdata", "packaged")
STEPS = 24

# case, model, sample rate, chunk, state inputs -> (initial shape), feed-back pairs
CASES = [
    ("silero_vad_16k", "silero-vad/silero_vad.onnx", 16000, 512,
     {"state": (2, 1, 128)}, [("stateN", "state")]),
    ("silero_vad_8k", "silero-vad/silero_vad.onnx", 8000, 256,
     {"state": (2, 1, 128)}, [("stateN", "state")]),
    ("silero_vad_op15", "silero-vad/silero_vad_16k_op15.onnx", 16000, 512,
     {"state": (2, 1, 128)}, [("stateN", "state")]),
    ("openwakeword_vad", "openwakeword/silero_vad.onnx", 16000, 512,
     {"h": (2, 1, 64), "c": (2, 1, 64)}, [("hn", "h"), ("cn", "c")]),
]


def signal(rate, samples):
    """Harmonic bursts (a 140 Hz voice-like tone with overtones, on for 0.25 s of every
    0.5 s) in low noise."""
    rng = np.random.default_rng(20261125)
    t = np.arange(samples) / rate
    tone = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 6))
    gate = (np.floor(t / 0.25) % 2 == 1).astype(np.float64)
    noise = 0.01 * rng.standard_normal(samples)
    return (0.3 * tone * gate + noise).astype(np.float32)


# case, model, input name, input shape
SINGLE = [
    ("paddleocr_cls", "rapidocr-onnxruntime/ch_ppocr_mobile_v2.0_cls_infer.onnx", "x",
     (1, 3, 48, 192)),
]


def image(shape):
    """A deterministic text-line-like image: dark strokes on a light ground, normalized as
    PaddleOCR normalizes its inputs ((x / 255 - 0.5) / 0.5)."""
    _, c, h, w = shape
    y, x = np.mgrid[0:h, 0:w]
    strokes = ((np.sin(x / 3.0) > 0.6) & (np.abs(y - h / 2) < h / 4)).astype(np.float64)
    pixels = 230 - 180 * strokes - 10 * (y / h)
    img = np.broadcast_to(pixels, (c, h, w))[None]
    return ((img / 255.0 - 0.5) / 0.5).astype(np.float32)


def main():
    for case, model, name, shape in SINGLE:
        session = ort.InferenceSession(os.path.join(EXTERNAL, model),
                                       providers=["CPUExecutionProvider"])
        x = image(shape)
        (y,) = session.run(None, {name: x})
        folder = os.path.join(OUT, case)
        os.makedirs(folder, exist_ok=True)
        np.save(os.path.join(folder, "input.npy"), x)
        np.save(os.path.join(folder, "output_0.npy"), y)
        print(f"{case}: output {y.ravel()}")
    for case, model, rate, chunk, states, feed in CASES:
        path = os.path.join(EXTERNAL, model)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        inputs = {i.name for i in session.get_inputs()}
        chunks = signal(rate, STEPS * chunk).reshape(STEPS, 1, chunk)
        state = {k: np.zeros(v, np.float32) for k, v in states.items()}
        stacked = {n: [] for n in names}
        for c in chunks:
            feeds = {"input": c, **state}
            if "sr" in inputs:
                feeds["sr"] = np.array(rate, dtype=np.int64)
            results = dict(zip(names, session.run(None, feeds)))
            for n in names:
                stacked[n].append(results[n])
            for out, inp in feed:
                state[inp] = results[out]
        folder = os.path.join(OUT, case)
        os.makedirs(folder, exist_ok=True)
        np.save(os.path.join(folder, "chunks.npy"), chunks)
        for k, n in enumerate(names):
            np.save(os.path.join(folder, f"output_{k}.npy"), np.stack(stacked[n]))
        probs = np.stack(stacked[names[0]]).ravel()
        print(f"{case}: {STEPS} steps, probability {probs.min():.4f}..{probs.max():.4f}")


if __name__ == "__main__":
    main()
