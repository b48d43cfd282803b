#!/usr/bin/env python3
"""Export a zoo of real architectures, with random weights, to ONNX for scripts/bench-zoo.

Usage: zoo_export.py OUT_DIR [--only REGEX] [--retry-failed]
       zoo_export.py --list [--only REGEX]

Writes, for each model M (skipped when OUT_DIR/M.onnx already exists):
  OUT_DIR/M.onnx           opset 17, static shapes, batch 1, TorchScript exporter
  OUT_DIR/M.in/NAME.npy    a fixed random input per graph input (seeded)
  OUT_DIR/M.meta.json      source, what was changed from the published architecture
  OUT_DIR/M.failed         instead of the above when the export failed: the reason,
                           one line (not retried unless --retry-failed); a process that
                           dies in an export leaves M.exporting, which the next start
                           records as M.failed (so restarting always gets through the list)

Nothing is downloaded: torchvision's weights=None, timm's pretrained=False, transformers'
models built from a config, ultralytics' models from their YAML. Every model is built
after torch.manual_seed(0) and its input drawn from numpy's default_rng(0), so every run
writes the same files. Images are 224x224 (smaller when the model's own default is);
text is 1x128 tokens with an all-ones attention mask; wav2vec2 takes 1 s of 16 kHz audio,
EnCodec's encoder 1 s of 24 kHz audio, Whisper's encoder its fixed 80x3000 log-mel input.

Environment (scripts/bench-zoo makes it: target/zoo-venv, created by /usr/bin/python3
with --system-site-packages so that Debian's torch 1.13 is the one used); versions known
to work together:
  torch==1.13.1 (python3-torch)  torchvision==0.14.1 (python3-torchvision)
  numpy==1.24.2 (python3-numpy; numpy 2 breaks torch 1.13)
  timm==1.0.31 (installed with --no-deps: its requirements would pull in a new torch)
  transformers==4.44.2  tokenizers==0.19.1  onnx==1.17.0  onnxruntime==1.32.0
  ultralytics==8.4.190 (optional; installed with the constraint numpy==1.24.2)
"""

import argparse
import json
import os
import random
import re
import sys
import time
import traceback
import warnings

import numpy as np

IMG = (1, 3, 224, 224)
SEQ = 128


def image(size=224):
    return {
        "input": np.random.default_rng(0).standard_normal(
            (1, 3, size, size), dtype=np.float32
        )
    }


def tokens(vocab, mask=True):
    rng = np.random.default_rng(0)
    # Avoid the first few ids (padding / special tokens in most vocabularies).
    feed = {"input_ids": rng.integers(5, vocab, size=(1, SEQ), dtype=np.int64)}
    if mask:
        feed["attention_mask"] = np.ones((1, SEQ), dtype=np.int64)
    return feed


def audio(samples, shape=None):
    x = np.random.default_rng(0).standard_normal((1, samples), dtype=np.float32) * 0.1
    return {"input_values": x.reshape(shape) if shape else x}


# ---- builders: each returns (torch module, feed dict of numpy arrays, note) ----


def tv(name, **kw):
    def build():
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kw), image(), ""

    return build


def timm_model(name, note="", **kw):
    def build():
        import timm

        cfg = timm.get_pretrained_cfg(name)
        size = min(224, cfg.input_size[-1]) if cfg is not None else 224
        extra = (
            f"{size}x{size} input"
            if cfg is not None and size != cfg.input_size[-1]
            else ""
        )
        m = timm.create_model(name, pretrained=False, **kw)
        return m, image(size), "; ".join(s for s in (note, extra) if s)

    return build


def convmixer():
    import torch
    from timm.models.convmixer import ConvMixer

    # convmixer_1024_20_ks9_p14 with 8 of its 20 layers (its entry point fixes the depth).
    m = ConvMixer(dim=1024, depth=8, kernel_size=9, patch_size=14)
    # torch 1.13 cannot export padding="same" (aten::_convolution_mode): the same padding
    # given as numbers (odd kernels, stride 1).
    for c in m.modules():
        if isinstance(c, torch.nn.Conv2d) and c.padding == "same":
            c.padding = tuple(k // 2 for k in c.kernel_size)
    return m, image(), "8 of 20 layers; padding='same' given as numbers"


class HFFirst:
    """Wraps a transformers model so the graph has its first output only (the hidden states)."""

    @staticmethod
    def wrap(model, names):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                return self.m(**dict(zip(names, args)), return_dict=False)[0]

        return Wrapped()


def hf(kind, note, mask=True):
    def build():
        import transformers as T

        if kind == "bert":
            m, feed = (
                T.BertModel(T.BertConfig(num_hidden_layers=4)),
                tokens(30522, mask),
            )
        elif kind == "distilbert":
            m, feed = (
                T.DistilBertModel(T.DistilBertConfig(n_layers=4)),
                tokens(30522, mask),
            )
        elif kind == "albert":
            cfg = T.AlbertConfig(
                embedding_size=128,
                hidden_size=768,
                num_attention_heads=12,
                intermediate_size=3072,
                num_hidden_layers=4,
            )
            m, feed = T.AlbertModel(cfg), tokens(30000, mask)
        elif kind == "roberta":
            cfg = T.RobertaConfig(
                num_hidden_layers=4, max_position_embeddings=514, pad_token_id=1
            )
            m, feed = T.RobertaModel(cfg), tokens(50265, mask)
        elif kind == "electra":
            m, feed = T.ElectraModel(T.ElectraConfig()), tokens(30522, mask)
        elif kind == "gpt2":
            m, feed = (
                T.GPT2Model(T.GPT2Config(n_layer=4, use_cache=False)),
                tokens(50257, False),
            )
        elif kind == "mobilebert":
            m, feed = T.MobileBertModel(T.MobileBertConfig()), tokens(30522, mask)
        elif kind == "t5":
            m, feed = T.T5EncoderModel(T.T5Config(use_cache=False)), tokens(32128, mask)
        elif kind == "wav2vec2":
            m, feed = (
                T.Wav2Vec2Model(T.Wav2Vec2Config(num_hidden_layers=4)),
                audio(16000),
            )
        elif kind == "whisper":
            cfg = T.WhisperConfig(
                d_model=384,
                encoder_layers=4,
                decoder_layers=4,
                encoder_attention_heads=6,
                decoder_attention_heads=6,
                encoder_ffn_dim=1536,
                decoder_ffn_dim=1536,
            )
            m = T.WhisperModel(cfg).get_encoder()
            x = np.random.default_rng(0).standard_normal(
                (1, 80, 3000), dtype=np.float32
            )
            feed = {"input_features": x}
        elif kind == "vit":
            m, feed = (
                T.ViTModel(T.ViTConfig(num_hidden_layers=4)),
                {"pixel_values": image()["input"]},
            )
        elif kind == "deit":
            cfg = T.DeiTConfig(
                hidden_size=384,
                num_hidden_layers=12,
                num_attention_heads=6,
                intermediate_size=1536,
            )
            m, feed = T.DeiTModel(cfg), {"pixel_values": image()["input"]}
        elif kind == "segformer":
            m = T.SegformerForSemanticSegmentation(T.SegformerConfig())
            feed = {"pixel_values": image()["input"]}
        elif kind == "encodec":
            m = T.EncodecModel(T.EncodecConfig()).encoder
            x = audio(24000, (1, 1, 24000))["input_values"]
            import torch

            class Enc(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.e = m

                def forward(self, x):
                    return self.e(x)

            return Enc(), {"input_values": x}, note
        else:
            raise ValueError(kind)
        return HFFirst.wrap(m, list(feed)), feed, note

    return build


def yolo(cfg):
    def build():
        os.environ.setdefault("YOLO_VERBOSE", "False")
        from ultralytics.nn.tasks import DetectionModel

        m = DetectionModel(cfg, verbose=False)
        # As ultralytics' own ONNX export: the head returns one [1, 84, anchors] tensor.
        for mod in m.modules():
            if hasattr(mod, "export") and hasattr(mod, "format"):
                mod.export = True
                mod.format = "onnx"
        return (
            m,
            image(),
            "224x224 input (640 native); head as ultralytics' ONNX export",
        )

    return build


def video(frames, size=112):
    return {
        "input": np.random.default_rng(0).standard_normal(
            (1, 3, frames, size, size), dtype=np.float32
        )
    }


def tv_video(name, frames=8, size=112):
    def build():
        import torchvision

        model = getattr(torchvision.models.video, name)(weights=None)
        return model, video(frames, size), f"{frames}x{size}x{size} clip"

    return build


def unet3d():
    # No package ships a 3-D U-Net without pulling in its own framework (MONAI), so the
    # architecture of Cicek et al. 2016 is written out here: two 3x3x3 convolutions with
    # batch norm and ReLU per level, 2x2x2 max pooling, ConvTranspose3d upsampling,
    # skip connections by concatenation; 3 levels, 16-64 channels.
    def build():
        import torch
        from torch import nn

        def block(cin, cout):
            return nn.Sequential(
                nn.Conv3d(cin, cout, 3, padding=1), nn.BatchNorm3d(cout), nn.ReLU(),
                nn.Conv3d(cout, cout, 3, padding=1), nn.BatchNorm3d(cout), nn.ReLU(),
            )

        class UNet3d(nn.Module):
            def __init__(self):
                super().__init__()
                self.down1, self.down2 = block(1, 16), block(16, 32)
                self.bottom = block(32, 64)
                self.pool = nn.MaxPool3d(2)
                self.up2, self.dec2 = nn.ConvTranspose3d(64, 32, 2, stride=2), block(64, 32)
                self.up1, self.dec1 = nn.ConvTranspose3d(32, 16, 2, stride=2), block(32, 16)
                self.head = nn.Conv3d(16, 3, 1)

            def forward(self, x):
                a = self.down1(x)
                b = self.down2(self.pool(a))
                c = self.bottom(self.pool(b))
                b = self.dec2(torch.cat([self.up2(c), b], 1))
                a = self.dec1(torch.cat([self.up1(b), a], 1))
                return self.head(a)

        x = np.random.default_rng(0).standard_normal((1, 1, 32, 64, 64), dtype=np.float32)
        return UNet3d().eval(), {"input": x}, "3-D U-Net written out, 1x32x64x64 volume"

    return build


L4 = "base config, 4 of 12 layers"
MODELS = [
    # torchvision
    ("resnet18", "torchvision", tv("resnet18")),
    ("resnet50", "torchvision", tv("resnet50")),
    ("mobilenet_v2", "torchvision", tv("mobilenet_v2")),
    ("mobilenet_v3_small", "torchvision", tv("mobilenet_v3_small")),
    ("mobilenet_v3_large", "torchvision", tv("mobilenet_v3_large")),
    ("efficientnet_b0", "torchvision", tv("efficientnet_b0")),
    ("squeezenet1_1", "torchvision", tv("squeezenet1_1")),
    ("shufflenet_v2_x1_0", "torchvision", tv("shufflenet_v2_x1_0")),
    ("regnet_y_400mf", "torchvision", tv("regnet_y_400mf")),
    ("regnet_x_400mf", "torchvision", tv("regnet_x_400mf")),
    ("densenet121", "torchvision", tv("densenet121")),
    ("convnext_tiny", "torchvision", tv("convnext_tiny")),
    ("vit_b_16", "torchvision", tv("vit_b_16")),
    ("mnasnet1_0", "torchvision", tv("mnasnet1_0")),
    ("googlenet", "torchvision", tv("googlenet", aux_logits=False, init_weights=True)),
    # timm
    ("mobilevitv2_050", "timm", timm_model("mobilevitv2_050")),
    ("efficientformerv2_s0", "timm", timm_model("efficientformerv2_s0")),
    ("caformer_s18", "timm", timm_model("caformer_s18")),
    ("poolformer_s12", "timm", timm_model("poolformer_s12")),
    ("efficientvit_b0", "timm", timm_model("efficientvit_b0")),
    ("efficientvit_m0", "timm", timm_model("efficientvit_m0")),
    ("levit_128s", "timm", timm_model("levit_128s")),
    ("ghostnet_100", "timm", timm_model("ghostnet_100")),
    ("rexnet_100", "timm", timm_model("rexnet_100")),
    ("deit_tiny", "timm", timm_model("deit_tiny_patch16_224")),
    ("vit_tiny", "timm", timm_model("vit_tiny_patch16_224")),
    ("convmixer_1024_20_ks9_p14", "timm", convmixer),
    ("mixer_s16", "timm", timm_model("mixer_s16_224")),
    ("resmlp_12", "timm", timm_model("resmlp_12_224")),
    ("edgenext_xx_small", "timm", timm_model("edgenext_xx_small")),
    ("tinynet_a", "timm", timm_model("tinynet_a")),
    ("lcnet_100", "timm", timm_model("lcnet_100")),
    ("repvit_m1", "timm", timm_model("repvit_m1")),
    ("fastvit_t8", "timm", timm_model("fastvit_t8")),
    ("tiny_vit_5m", "timm", timm_model("tiny_vit_5m_224")),
    # Relative-position attention as Einsum, "same" padding computed with Clip.
    ("maxvit_tiny", "timm", timm_model("maxvit_tiny_tf_224")),
    ("pit_ti", "timm", timm_model("pit_ti_224")),
    ("mobilenetv4_conv_small", "timm", timm_model("mobilenetv4_conv_small")),
    ("hrnet_w18_small", "timm", timm_model("hrnet_w18_small")),
    # transformers (models without task heads; outputs the last hidden states)
    ("bert", "transformers", hf("bert", "bert-base " + L4)),
    ("distilbert", "transformers", hf("distilbert", "distilbert-base, 4 of 6 layers")),
    ("albert", "transformers", hf("albert", "albert-base, 4 of 12 layers")),
    ("roberta", "transformers", hf("roberta", "roberta-base, 4 of 12 layers")),
    (
        "electra_small",
        "transformers",
        hf("electra", "electra-small discriminator, full"),
    ),
    (
        "gpt2",
        "transformers",
        hf("gpt2", "gpt2 (124M) config, 4 of 12 layers, no LM head"),
    ),
    (
        "mobilebert",
        "transformers",
        hf("mobilebert", "mobilebert-uncased, full 24 layers"),
    ),
    ("t5_small_encoder", "transformers", hf("t5", "t5-small encoder, full")),
    (
        "wav2vec2",
        "transformers",
        hf("wav2vec2", "wav2vec2-base, 4 of 12 layers, 1 s 16 kHz"),
    ),
    (
        "whisper_tiny_encoder",
        "transformers",
        hf("whisper", "whisper-tiny encoder, full, 80x3000 mel"),
    ),
    ("hf_vit", "transformers", hf("vit", "vit-base-patch16-224 " + L4)),
    ("hf_deit_small", "transformers", hf("deit", "deit-small, full")),
    (
        "segformer_b0",
        "transformers",
        hf("segformer", "mit-b0 segmentation, 224x224 input"),
    ),
    (
        "encodec_encoder",
        "transformers",
        hf("encodec", "encodec_24khz encoder, 1 s 24 kHz"),
    ),
    # torchvision video (3-D convolutions)
    ("r3d_18", "torchvision", tv_video("r3d_18")),
    ("mc3_18", "torchvision", tv_video("mc3_18")),
    ("r2plus1d_18", "torchvision", tv_video("r2plus1d_18")),
    ("s3d", "torchvision", tv_video("s3d", frames=16, size=224)),
    ("unet3d", "torch", unet3d()),
    # ultralytics (optional)
    ("yolov8n", "ultralytics", yolo("yolov8n.yaml")),
    ("yolo11n", "ultralytics", yolo("yolo11n.yaml")),
]


def one_line(e):
    msg = f"{type(e).__name__}: {e}".replace("\n", " ")
    return re.sub(r"\s+", " ", msg)[:300]


def export(name, source, build, out):
    import onnx
    import torch

    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model, feed, note = build()
    model = model.eval()
    # Zero-initialized classifier heads (torchvision's ViT, timm's MLP-Mixer and ResMLP)
    # would make the output all zeros and the comparison with ONNX Runtime vacuous.
    redrawn = 0
    with torch.no_grad():
        for prm in model.parameters():
            if prm.dim() >= 2 and prm.is_floating_point() and not prm.any():
                prm.normal_(0.0, 0.02)
                redrawn += 1
    if redrawn:
        note = "; ".join(
            x for x in (note, f"{redrawn} all-zero weight tensor(s) re-drawn") if x
        )
    names = list(feed)
    args = tuple(torch.from_numpy(feed[k]) for k in names)
    path = os.path.join(out, f"{name}.onnx")
    tmp = path + ".tmp"
    t0 = time.perf_counter()
    # With gradients enabled: under no_grad torch 1.13's nn.MultiheadAttention takes its
    # fused fast path (aten::_native_multi_head_attention), which the exporter cannot export.
    torch.onnx.export(
        model, args, tmp, opset_version=17, input_names=names, do_constant_folding=True
    )
    # The exporter may drop an input the graph does not use: keep the ones the graph has.
    used = [i.name for i in onnx.load(tmp, load_external_data=False).graph.input]
    os.makedirs(os.path.join(out, f"{name}.in"), exist_ok=True)
    for k in used:
        np.save(os.path.join(out, f"{name}.in", f"{k}.npy"), feed[k])
    meta = {
        "name": name,
        "source": source,
        "note": note,
        "inputs": used,
        "export_s": round(time.perf_counter() - t0, 1),
    }
    with open(os.path.join(out, f"{name}.meta.json"), "w") as f:
        json.dump(meta, f)
    os.replace(tmp, path)
    return meta


def main():
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("out", nargs="?")
    p.add_argument("--only", default="")
    p.add_argument("--list", action="store_true")
    p.add_argument("--retry-failed", action="store_true")
    a = p.parse_args()
    only = re.compile(a.only)
    chosen = [m for m in MODELS if only.search(m[0])]
    if a.list:
        for name, source, _ in chosen:
            print(f"{name:24} {source}")
        return
    if not a.out:
        sys.exit(__doc__.strip())
    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(a.out, "ultralytics-config"))
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    for name, source, build in chosen:
        base = os.path.join(a.out, name)
        failed, marker = base + ".failed", base + ".exporting"
        if os.path.exists(base + ".onnx"):
            continue
        # A marker left by a run that crashed during this export counts as a failure.
        if os.path.exists(marker) and not a.retry_failed:
            with open(failed, "w") as f:
                f.write("the exporter crashed (process died during export)\n")
            os.remove(marker)
        if os.path.exists(failed) and not a.retry_failed:
            continue
        open(marker, "w").close()
        try:
            meta = export(name, source, build, a.out)
            print(
                f"exported {name} ({source}) in {meta['export_s']} s",
                file=sys.stderr,
                flush=True,
            )
            if os.path.exists(failed):
                os.remove(failed)
        except Exception as e:  # noqa: BLE001 - any failure is recorded and skipped, never fatal
            with open(failed, "w") as f:
                f.write(one_line(e) + "\n")
            with open(base + ".failed.log", "w") as f:
                traceback.print_exc(file=f)
            print(
                f"export failed: {name}: {one_line(e)[:160]}",
                file=sys.stderr,
                flush=True,
            )
        finally:
            os.remove(marker)
            if os.path.exists(base + ".onnx.tmp"):
                os.remove(base + ".onnx.tmp")


if __name__ == "__main__":
    main()
