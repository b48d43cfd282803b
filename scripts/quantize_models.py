#!/usr/bin/env python3
"""Models and data for scripts/bench-quantize: float ONNX models, calibration and held-out inputs.

Usage: quantize_models.py OUT_DIR [--models LIST] [--samples N] [--torch-python PY]

Writes, for each model M (resnet18, mobilenet_v2, squeezenet1_1, ppocr_det, ppocr_rec):
  OUT_DIR/M/model.onnx          the float model as nnc compiles it
  OUT_DIR/M/model_static.onnx   the same with a fixed input shape (for ONNX Runtime's quantizer)
  OUT_DIR/M/calib/NNN.npy       N calibration inputs, one sample each, shaped as the input
  OUT_DIR/M/heldout/NNN.npy     N held-out inputs (disjoint image regions, other text)
  OUT_DIR/M/meta.json           input name and shape, preprocessing, float-model sanity checks
A model whose meta.json matches the requested settings is left as it is.

Classifiers (torchvision, weights=None, torch seed 0, opset 17, TorchScript exporter):
BatchNorm running statistics come from 64 image crops (train-mode passes with
momentum=None, i.e. a plain average over the batches, then eval), as shared/models were
made but with natural images instead of noise. The export runs under --torch-python (any
interpreter with torch and torchvision; numpy and torch only are imported in that mode),
so a small CPU-only torch from the system's packages can be used beside this venv.

Images are the colour and grey photographs scikit-image's wheel bundles (those that load
without a download). Each image is cut in two halves along its longer side; calibration
crops come from one half and held-out crops from the other (alternating per image), so
no pixel is shared. Crops: square, 40-100% of the half's shorter side, bilinear resize to
224, random horizontal flip and brightness 0.8-1.2, ImageNet mean/std, NCHW float32.

PaddleOCR (PP-OCRv4 det and rec as rapidocr_onnxruntime ships them, opset 12): text
rendered with PIL in the fonts found under /usr/share/fonts (else PIL's default font),
random words, numbers, dates and prices, random colours, photographic or flat
backgrounds, blur and noise; BGR channel order and (x/255 - 0.5) / 0.5 as rapidocr's
preprocessing does. Recognizer: one line resized to height 48 keeping its aspect ratio
(width at most 320), padded with zeros (after normalization) to [1,3,48,320]. Detector:
[1,3,320,320] scenes of 2-6 lines. The declared inputs are dynamic, so model.onnx is the
shipped file (nnc gets --input-shape x=...) and model_static.onnx fixes the input dims.
"""
import argparse
import glob
import importlib.util
import inspect
import json
import os
import shutil
import string
import subprocess
import sys
import warnings

import numpy as np

# Bump when the data a model gets would change, so cached outputs are rebuilt.
DATA_VERSION = 2
CLASSIFIERS = ("resnet18", "mobilenet_v2", "squeezenet1_1")
OCR = ("ppocr_det", "ppocr_rec")
ALL = CLASSIFIERS + OCR
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
REC_SHAPE = (1, 3, 48, 320)
DET_SHAPE = (1, 3, 320, 320)


# ---------------------------------------------------------------- torch side
def export_torchvision(name, onnx_path, bn_npy, out_npy):
    """Runs under the torch interpreter: only numpy, torch and torchvision are imported."""
    import torch
    import torchvision

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    images = torch.from_numpy(np.load(bn_npy))
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        # momentum=None: running statistics become the plain average over the batches.
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for batch in images.split(16):
            model(batch)
    model.eval()
    x = images[:1].clone()
    kwargs = dict(opset_version=17, input_names=["input"], output_names=["output"])
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    with torch.no_grad():
        torch.onnx.export(model, (x,), onnx_path, **kwargs)
        np.save(out_npy, model(images[:8]).numpy())
    print(f"{name}: torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{len(bns)} BatchNorm layers set from {len(images)} crops")


# ---------------------------------------------------------------- images
def natural_images():
    """The photographs scikit-image bundles, as uint8 HxWx3 (grey ones replicated)."""
    import skimage.data

    names = ["astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field",
             "immunohistochemistry", "retina", "camera", "coins", "grass", "gravel", "brick"]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in names:
            try:
                a = getattr(skimage.data, n)()
            except Exception:  # noqa: BLE001 - some need a download: skip them
                continue
            if a.ndim == 2:
                a = np.repeat(a[:, :, None], 3, axis=2)
            out.append((n, np.ascontiguousarray(a[:, :, :3]).astype(np.uint8)))
    if len(out) < 4:
        sys.exit("quantize_models: fewer than 4 scikit-image photographs load without a download")
    return out


def halves(images):
    """(calibration halves, held-out halves): each image split along its longer side."""
    calib, held = [], []
    for i, (_, a) in enumerate(images):
        h, w = a.shape[:2]
        if w >= h:
            p, q = a[:, : w // 2], a[:, w // 2:]
        else:
            p, q = a[: h // 2], a[h // 2:]
        (calib if i % 2 == 0 else held).append(p)
        (held if i % 2 == 0 else calib).append(q)
    return calib, held


def random_crop(rng, src, out_hw, min_frac=0.4):
    """A random square crop of src resized to out_hw (uint8 RGB, PIL bilinear)."""
    from PIL import Image

    h, w = src.shape[:2]
    side = int(min(h, w) * rng.uniform(min_frac, 1.0))
    y = int(rng.integers(0, h - side + 1))
    x = int(rng.integers(0, w - side + 1))
    img = Image.fromarray(src[y: y + side, x: x + side])
    img = img.resize((out_hw[1], out_hw[0]), Image.BILINEAR)
    a = np.asarray(img)
    if rng.random() < 0.5:
        a = a[:, ::-1]
    return a


def imagenet_samples(rng, pool, n):
    out = []
    order = rng.permutation(n) % len(pool)
    for k in range(n):
        a = random_crop(rng, pool[order[k]], (224, 224)).astype(np.float32) / 255.0
        a = np.clip(a * rng.uniform(0.8, 1.2), 0.0, 1.0)
        a = (a - IMAGENET_MEAN) / IMAGENET_STD
        out.append(np.ascontiguousarray(a.transpose(2, 0, 1)[None], dtype=np.float32))
    return out


# ---------------------------------------------------------------- text
def font_files():
    files = sorted(set(glob.glob("/usr/share/fonts/**/*.ttf", recursive=True)
                       + glob.glob("/usr/share/fonts/**/*.otf", recursive=True)))
    # Symbol and math fonts draw boxes or glyphs no OCR model reads.
    return [f for f in files if not any(s in os.path.basename(f).lower() for s in ("math", "symbol", "pdf"))]


def load_font(rng, fonts, size):
    from PIL import ImageFont

    if fonts:
        try:
            return ImageFont.truetype(fonts[int(rng.integers(len(fonts)))], size)
        except OSError:
            pass
    return ImageFont.load_default(size=size)


def random_text(rng, max_chars):
    letters = string.ascii_letters

    def word():
        n = int(rng.integers(2, 10))
        w = "".join(rng.choice(list(string.ascii_lowercase), n))
        r = rng.random()
        return w.capitalize() if r < 0.3 else w.upper() if r < 0.4 else w

    def token():
        r = rng.random()
        if r < 0.55:
            return word()
        if r < 0.7:
            return str(int(rng.integers(0, 100000)))
        if r < 0.8:
            return f"{int(rng.integers(1, 29)):02d}/{int(rng.integers(1, 13)):02d}/{int(rng.integers(1990, 2030))}"
        if r < 0.9:
            return f"${rng.uniform(0, 999):.2f}"
        return "".join(rng.choice(list(letters + string.digits), int(rng.integers(3, 8))))

    text = token()
    for _ in range(int(rng.integers(0, 4))):
        t = token()
        if len(text) + 1 + len(t) > max_chars:
            break
        text += (rng.choice([" ", " ", " ", ", ", " - ", ": "])) + t
    return text


def random_colors(rng):
    """(background RGB, text RGB) with a clear contrast either way round."""
    light = rng.random() < 0.7
    bg = rng.integers(170, 256, 3) if light else rng.integers(0, 90, 3)
    fg = rng.integers(0, 80, 3) if light else rng.integers(180, 256, 3)
    return tuple(int(v) for v in bg), tuple(int(v) for v in fg)


def background(rng, photo_pool, hw, bg):
    """A flat colour, a gradient, or a faded photograph tinted towards bg."""
    h, w = hw
    r = rng.random()
    base = np.empty((h, w, 3), np.float32)
    base[:] = bg
    if r < 0.35:
        return base
    if r < 0.6:
        t = np.linspace(0.0, 1.0, w, dtype=np.float32)[None, :, None]
        other = np.clip(np.array(bg, np.float32) + rng.uniform(-50, 50, 3), 0, 255)
        return base * (1 - t) + other * t
    photo = random_crop(rng, photo_pool[int(rng.integers(len(photo_pool)))], (h, w), 0.3)
    alpha = rng.uniform(0.15, 0.45)
    return base * (1 - alpha) + photo.astype(np.float32) * alpha


def finish(rng, canvas):
    """Blur and sensor noise; uint8 RGB."""
    from PIL import Image, ImageFilter

    img = Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8))
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
    a = np.asarray(img).astype(np.float32)
    a += rng.normal(0.0, rng.uniform(0.0, 8.0), a.shape)
    return np.clip(a, 0, 255).astype(np.uint8)


def ocr_normalize(rgb):
    """rapidocr: BGR (it reads images with OpenCV), x/255, minus 0.5, over 0.5; CHW."""
    bgr = rgb[:, :, ::-1].astype(np.float32)
    return ((bgr / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


def rec_sample(rng, fonts, photo_pool):
    from PIL import Image, ImageDraw
    import cv2

    text = random_text(rng, 24)
    font = load_font(rng, fonts, int(rng.integers(24, 44)))
    l, t, r, b = font.getbbox(text)
    pad_x, pad_y = int(rng.integers(2, 14)), int(rng.integers(2, 10))
    w, h = (r - l) + 2 * pad_x, (b - t) + 2 * pad_y
    bg, fg = random_colors(rng)
    canvas = Image.fromarray(background(rng, photo_pool, (h, w), bg).astype(np.uint8))
    ImageDraw.Draw(canvas).text((pad_x - l, pad_y - t), text, font=font, fill=fg)
    if rng.random() < 0.3:
        canvas = canvas.rotate(rng.uniform(-2, 2), Image.BILINEAR, expand=False, fillcolor=bg)
    rgb = finish(rng, np.asarray(canvas).astype(np.float32))
    # rapidocr's resize_norm_img for a fixed 320-wide batch: height 48, width by the
    # aspect ratio capped at 320, the rest zeros (mid grey once normalized).
    _, _, H, W = REC_SHAPE
    rw = min(W, int(np.ceil(H * rgb.shape[1] / rgb.shape[0])))
    resized = cv2.resize(rgb, (rw, H))
    x = np.zeros(REC_SHAPE, np.float32)
    x[0, :, :, :rw] = ocr_normalize(resized)
    return x, text


def det_sample(rng, fonts, photo_pool):
    from PIL import Image, ImageDraw

    _, _, H, W = DET_SHAPE
    bg, fg = random_colors(rng)
    canvas = Image.fromarray(background(rng, photo_pool, (H, W), bg).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    mask = np.zeros((H, W), bool)
    y = int(rng.integers(4, 40))
    for _ in range(int(rng.integers(2, 7))):
        size = int(rng.integers(14, 38))
        font = load_font(rng, fonts, size)
        # About 0.6 em per character: keep the line inside the canvas.
        text = random_text(rng, max(4, int((W - 8) / (0.6 * size))))
        l, t, r, b = font.getbbox(text)
        while r - l > W - 8 and len(text) > 1:
            text = text[:-1]
            l, t, r, b = font.getbbox(text)
        if r - l > W - 8:
            continue
        x = int(rng.integers(4, W - (r - l) - 3))
        if y + (b - t) > H - 4:
            break
        color = fg if rng.random() < 0.8 else tuple(int(v) for v in rng.integers(0, 256, 3))
        draw.text((x - l, y - t), text, font=font, fill=color)
        mask[y: y + (b - t), x: x + (r - l)] = True
        y += (b - t) + int(rng.integers(6, 40))
    rgb = finish(rng, np.asarray(canvas).astype(np.float32))
    return ocr_normalize(rgb)[None].astype(np.float32), mask


# ---------------------------------------------------------------- models
def save_samples(d, samples):
    os.makedirs(d, exist_ok=True)
    for f in glob.glob(os.path.join(d, "*.npy")):
        os.remove(f)
    for i, s in enumerate(samples):
        np.save(os.path.join(d, f"{i:03d}.npy"), s)


def ort_session(path):
    import onnxruntime as ort

    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def static_copy(src, dst, shape):
    """src with its first input's dimensions fixed to shape (ONNX Runtime's quantizer wants them)."""
    import onnx

    m = onnx.load(src)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    if len(dims) != len(shape):
        sys.exit(f"quantize_models: {src}: input has rank {len(dims)}, expected {len(shape)}")
    for d, v in zip(dims, shape):
        d.Clear()
        d.dim_value = v
    onnx.save(m, dst)


def make_classifier(name, d, n, torch_python, pools):
    import onnx

    calib_pool, held_pool = pools
    calib = imagenet_samples(np.random.default_rng(1), calib_pool, n)
    held = imagenet_samples(np.random.default_rng(2), held_pool, n)
    bn = np.concatenate(imagenet_samples(np.random.default_rng(3), calib_pool, 64))
    tmp = os.path.join(d, "tmp")
    os.makedirs(tmp, exist_ok=True)
    np.save(os.path.join(tmp, "bn.npy"), bn)
    model = os.path.join(d, "model.onnx")
    r = subprocess.run([torch_python, os.path.abspath(__file__), "--export-torchvision", name, model,
                        os.path.join(tmp, "bn.npy"), os.path.join(tmp, "torch_out.npy")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"quantize_models: exporting {name} with {torch_python} failed:\n{r.stderr[-3000:]}")
    print(r.stdout.strip())
    shutil.copyfile(model, os.path.join(d, "model_static.onnx"))  # already static
    s = ort_session(model)
    torch_out = np.load(os.path.join(tmp, "torch_out.npy"))
    ort_out = np.concatenate([s.run(None, {"input": bn[i: i + 1]})[0] for i in range(8)])
    gap = float(np.abs(torch_out - ort_out).max())
    held_top1 = [int(s.run(None, {"input": x})[0].argmax()) for x in held]
    save_samples(os.path.join(d, "calib"), calib)
    save_samples(os.path.join(d, "heldout"), held)
    shutil.rmtree(tmp)
    ops = len(onnx.load(model).graph.node)
    return {
        "kind": "classifier", "input_name": "input", "input_shape": [1, 3, 224, 224],
        "nnc_input_shape": None, "nodes": ops, "source": f"torchvision {name}, weights=None, torch seed 0",
        "preprocess": "224x224 crops of scikit-image photographs, ImageNet mean/std, NCHW",
        "sanity": {"max_abs_torch_vs_ort": gap,
                   "distinct_heldout_top1": len(set(held_top1)),
                   "heldout_top1_mode_share": max(held_top1.count(c) for c in set(held_top1)) / len(held_top1)},
    }


def rapidocr_models():
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("quantize_models: rapidocr_onnxruntime is not installed")
    root = list(spec.submodule_search_locations)[0]
    found = sorted(glob.glob(os.path.join(root, "**", "*.onnx"), recursive=True))
    det = [f for f in found if "det" in os.path.basename(f).lower()]
    rec = [f for f in found if "rec" in os.path.basename(f).lower()]
    if not det or not rec:
        sys.exit(f"quantize_models: no det/rec .onnx in {root}: {found}")
    return det[0], rec[0]


def rec_characters(model):
    import onnx

    meta = {p.key: p.value for p in onnx.load(model).metadata_props}
    chars = meta.get("character", "").splitlines()
    # rapidocr's CTC decoding: index 0 is the blank, the dictionary, then a space.
    return ["<blank>"] + chars + [" "]


def ctc_decode(probs, chars):
    idx = probs.reshape(-1, probs.shape[-1]).argmax(axis=1)
    out, prev = [], -1
    for i in idx:
        if i != prev and i != 0 and i < len(chars):
            out.append(chars[i])
        prev = i
    return "".join(out)


def make_ocr(name, d, n, pools):
    import onnx

    det_src, rec_src = rapidocr_models()
    src = det_src if name == "ppocr_det" else rec_src
    shape = DET_SHAPE if name == "ppocr_det" else REC_SHAPE
    model = os.path.join(d, "model.onnx")
    shutil.copyfile(src, model)
    static = os.path.join(d, "model_static.onnx")
    static_copy(model, static, shape)
    m = onnx.load(model)
    input_name = m.graph.input[0].name
    fonts = font_files()
    calib_pool, held_pool = pools
    samples = {}
    extra = {}
    s = ort_session(static)
    for split, seed, pool in (("calib", 11, calib_pool), ("heldout", 12, held_pool)):
        rng = np.random.default_rng(seed)
        xs, labels = [], []
        for _ in range(n):
            x, label = (det_sample if name == "ppocr_det" else rec_sample)(rng, fonts, pool)
            xs.append(x)
            labels.append(label)
        samples[split] = xs
        if split == "heldout":
            if name == "ppocr_rec":
                chars = rec_characters(model)
                read = [ctc_decode(s.run(None, {input_name: x})[0], chars) for x in xs]
                extra = {"float_exact_reads": sum(r == t for r, t in zip(read, labels)) / n,
                         "examples": [{"text": t, "float_read": r} for t, r in list(zip(labels, read))[:5]]}
            else:
                # DB's probability map against the boxes the text was drawn in: a box
                # is loose around its glyphs, so "covered" stays well below 1.
                hit = boxes = fired = 0
                for x, mask in zip(xs, labels):
                    on = s.run(None, {input_name: x})[0].reshape(mask.shape) > 0.3
                    hit += int((on & mask).sum())
                    boxes += int(mask.sum())
                    fired += int(on.sum())
                extra = {"text_box_pixels_above_0.3": hit / max(boxes, 1),
                         "pixels_above_0.3_inside_boxes": hit / max(fired, 1)}
    save_samples(os.path.join(d, "calib"), samples["calib"])
    save_samples(os.path.join(d, "heldout"), samples["heldout"])
    dims = "x".join(str(v) for v in shape)
    return {
        "kind": "detector" if name == "ppocr_det" else "recognizer",
        "input_name": input_name, "input_shape": list(shape),
        "nnc_input_shape": f"{input_name}={dims}", "nodes": len(m.graph.node),
        "source": f"rapidocr_onnxruntime {os.path.relpath(src, os.path.dirname(os.path.dirname(src)))}",
        "declared_input": [dd.dim_value or dd.dim_param or "?" for dd in m.graph.input[0].type.tensor_type.shape.dim],
        "fonts": len(fonts) or "PIL default",
        "preprocess": ("rendered text line, height 48, width by aspect ratio <= 320, zero-padded right"
                       if name == "ppocr_rec" else "320x320 scene of 2-6 rendered text lines")
                      + "; BGR, (x/255-0.5)/0.5, NCHW",
        "sanity": extra,
    }


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--export-torchvision":
        export_torchvision(*sys.argv[2:6])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--models", default=",".join(ALL))
    ap.add_argument("--samples", type=int, default=64, help="calibration and held-out samples each")
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--list-stale", action="store_true",
                    help="only print the models that would be (re)built, one a line")
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    bad = [m for m in models if m not in ALL]
    if bad:
        sys.exit(f"quantize_models: unknown models {bad}; known: {','.join(ALL)}")
    want = {"data_version": DATA_VERSION, "samples": a.samples}

    def up_to_date(name):
        try:
            with open(os.path.join(a.out, name, "meta.json")) as f:
                old = json.load(f)
        except (OSError, ValueError):
            return False
        return all(old.get(k) == v for k, v in want.items())

    stale = [m for m in models if not up_to_date(m)]
    if a.list_stale:
        print("\n".join(stale))
        return
    for name in models:
        if name not in stale:
            print(f"{name}: up to date in {os.path.join(a.out, name)}")
    if not stale:
        return
    images = natural_images()
    pools = halves(images)
    for name in stale:
        d = os.path.join(a.out, name)
        meta_path = os.path.join(d, "meta.json")
        if os.path.exists(meta_path):
            os.remove(meta_path)
        os.makedirs(d, exist_ok=True)
        if name in CLASSIFIERS:
            meta = make_classifier(name, d, a.samples, a.torch_python, pools)
        else:
            meta = make_ocr(name, d, a.samples, pools)
        meta.update(want)
        meta["name"] = name
        meta["images"] = [n for n, _ in images]
        # meta.json last: its presence means the directory is complete.
        with open(meta_path, "w") as f:
            json.dump(meta, f, indent=1)
        print(f"{name}: {d} ({a.samples} calibration + {a.samples} held-out), sanity {json.dumps(meta['sanity'])}")


if __name__ == "__main__":
    main()
