"""Reference data for engine/embed: test images, torchvision's preprocessing
of them, and the PyTorch CLIP test models' embeddings.

    /usr/bin/python3 testdata/embed/make_refs.py testdata/embed

Run make_tokenizer.js first (tokens.json holds Hugging Face's ids).

Writes:
  images/*.png, *.jpg   synthetic test images (gradients, shapes, texture)
  crops/<name>.png      torchvision's Resize(224, BICUBIC) + CenterCrop(224)
                        of each, as the 8-bit image ToTensor receives
  refs.json             per image the PyTorch image embedding of the full
                        torchvision pipeline; per text the ids (CLIP's
                        truncation to 77, zero padding) and the PyTorch text
                        embedding

The models are rebuilt from models/export's recipes with their seeds and
checked against the committed ONNX reference outputs first, so the
embeddings are those of the weights in testdata/models.
"""
import json
import os
import sys

import numpy as np
import torch
from PIL import Image
from torchvision import transforms

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "models", "export"))
import clip_text  # noqa: E402
import clip_vision  # noqa: E402
import exportlib  # noqa: E402

MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)
CONTEXT = 77


def synthetic(w, h, seed):
    """A photo-like RGB image: gradients, discs, stripes and noise."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    img[..., 0] = 255 * x / max(w - 1, 1)
    img[..., 1] = 255 * y / max(h - 1, 1)
    img[..., 2] = 128 + 100 * np.sin(x / 7.0) * np.cos(y / 11.0)
    for _ in range(6):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(5, min(w, h) / 3)
        col = rng.uniform(0, 255, size=3)
        img[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = col
    img[(x.astype(int) // 9) % 2 == 0, :] *= 0.85
    img += rng.normal(0, 4, size=img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


IMAGES = [
    # name, file, size, mode, save options
    ("landscape", "landscape.png", (320, 240), "RGB", {}),
    ("portrait_gray", "portrait_gray.png", (150, 260), "L", {}),
    ("small", "small.png", (97, 61), "RGB", {}),
    ("exact", "exact.png", (224, 224), "RGB", {}),
    ("odd", "odd.png", (301, 227), "RGB", {}),
    ("jpeg444", "jpeg444.jpg", (400, 300), "RGB", {"quality": 95, "subsampling": 0}),
    ("jpeg420", "jpeg420.jpg", (333, 500), "RGB", {"quality": 85, "subsampling": 2}),
]


def rebuilt(module, cls, ref_dir, in_name, out_name):
    exportlib.seed_everything(module.SEED)
    model = cls(module.SIZES["test"])
    exportlib.randomize_norms(model)
    model.eval()
    x = np.load(os.path.join(ref_dir, "input.%s.npy" % in_name))
    want = np.load(os.path.join(ref_dir, "output.%s.npy" % out_name))
    with torch.no_grad():
        got = model(torch.from_numpy(x))[0].numpy()
    err = float(np.abs(got - want).max())
    assert err < 1e-5, "%s rebuilt differs from the exported reference by %g" % (module.NAME, err)
    return model, err


def main(out):
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    os.makedirs(os.path.join(out, "crops"), exist_ok=True)
    vision, verr = rebuilt(clip_vision, clip_vision.ClipVision, os.path.join(ROOT, "testdata/models/clip_vision/ref"), "pixel_values", "image_embeds")
    text, terr = rebuilt(clip_text, clip_text.ClipText, os.path.join(ROOT, "testdata/models/clip_text/ref"), "input_ids", "text_embeds")
    geometry = transforms.Compose([transforms.Resize(224, interpolation=transforms.InterpolationMode.BICUBIC), transforms.CenterCrop(224)])
    full = transforms.Compose([geometry, lambda im: im.convert("RGB"), transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    refs = {"rebuilt_error": {"clip_vision": verr, "clip_text": terr}, "images": [], "texts": []}
    for i, (name, fname, (w, h), mode, opts) in enumerate(IMAGES):
        arr = synthetic(w, h, 100 + i)
        im = Image.fromarray(arr, "RGB")
        if mode == "L":
            im = im.convert("L")
        path = os.path.join(out, "images", fname)
        im.save(path, **opts)
        loaded = Image.open(path)
        loaded.load()
        crop = geometry(loaded).convert("RGB")
        crop.save(os.path.join(out, "crops", name + ".png"))
        pixels = full(loaded)[None]
        # torchvision's tensor is exactly the crop normalised in float32.
        again = (torch.from_numpy(np.asarray(crop)).permute(2, 0, 1).float() / 255 - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
        assert torch.equal(again, pixels[0]), name
        with torch.no_grad():
            emb = vision(pixels)[0][0].numpy()
        refs["images"].append({"name": name, "file": "images/" + fname, "crop": "crops/" + name + ".png",
                               "mode": loaded.mode, "size": [w, h], "image_embeds": emb.tolist()})
    with open(os.path.join(out, "tokens.json")) as f:
        cases = json.load(f)
    eot = clip_text.SIZES["test"].vocab - 1
    for c in cases:
        ids = list(c["ids"])
        if len(ids) > CONTEXT:
            ids = ids[:CONTEXT]
            ids[-1] = eot  # OpenAI's clip.tokenize(truncate=True)
        row = np.zeros((1, CONTEXT), dtype=np.int64)
        row[0, :len(ids)] = ids
        with torch.no_grad():
            emb = text(torch.from_numpy(row))[0][0].numpy()
        refs["texts"].append({"text": c["text"], "ids": row[0].tolist(), "text_embeds": emb.tolist()})
    with open(os.path.join(out, "refs.json"), "w") as f:
        json.dump(refs, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__))
