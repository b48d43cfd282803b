#!/usr/bin/env python3
"""Export torchvision ResNet18 and SqueezeNet 1.1, with random weights, for scripts/bench-inference.

Usage: export_torchvision_models.py OUT_DIR

Writes, for M in resnet18 and squeezenet1_1:
  OUT_DIR/M.onnx              opset 17, input [1, 3, 224, 224], TorchScript exporter
  OUT_DIR/M.onnx.input.npy    a fixed random input (float32, seeded)
  OUT_DIR/M.onnx.output.npy   ONNX Runtime's output for that input (the reference)

Needs torch, torchvision, onnx and onnxruntime. Nothing is downloaded: weights=None
gives torchvision's random initialization, seeded so every run writes the same model.
"""
import os
import sys
import warnings

import numpy as np
import onnxruntime as ort
import torch
import torchvision

if len(sys.argv) != 2:
    sys.exit(__doc__.strip())
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
# The TorchScript exporter (dynamo=False) is deprecated but works offline and
# needs no onnxscript; silence its deprecation notice.
warnings.filterwarnings("ignore", category=DeprecationWarning)

for name in ("resnet18", "squeezenet1_1"):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32))
    path = os.path.join(out, f"{name}.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, opset_version=17, dynamo=False,
                          input_names=["input"], output_names=["output"])
    np.save(f"{path}.input.npy", x.numpy())
    # The reference is ONNX Runtime's result on the exported file itself, so it
    # checks nnc against the peer it is timed against, not against PyTorch.
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    y = s.run(None, {"input": x.numpy()})[0]
    np.save(f"{path}.output.npy", y)
    with torch.no_grad():
        gap = float(np.abs(model(x).numpy() - y).max())
    print(f"{path}: output {list(y.shape)}, max |torch - onnxruntime| = {gap:.2e}")
