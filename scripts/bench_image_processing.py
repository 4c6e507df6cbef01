"""The host's cost of preparing one Geometry3k image the way EasyR1 does inside its RL step
(issue 13): a benchmark, not a test. It prints milliseconds an image; nothing reads them.

    python scripts/bench_image_processing.py

What it times, per image, on one CPU thread (torch.set_num_threads(1): the Ray workers each
run their own loop):

1. `process_image` (EasyR1 @8460e817 verl/utils/dataset.py): open the dataset's PNG bytes,
   `load()`, scale up to data.min_pixels 262,144 (PIL `resize`, its default bicubic), convert
   to RGB. The image is a line drawing (400 x 300, black lines on white) standing in for
   Geometry3k's diagrams (hiyouga/geometry3k: 12.2 MB for 601 test images, ~20 KB a PNG).
2. transformers' Qwen2.5-VL image processor on that image with the model's own bounds
   (preprocessor_config min_pixels 3,136, max_pixels 12,845,056): smart_resize to 504 x 504,
   rescale, normalise, cut into 1,296 patch vectors of 1,176 values. Two forms:
   - the PIL/numpy processor transformers installs here (slow path);
   - the operations of the torchvision ("fast") processor, which transformers 4.54-4.56 (EasyR1
     pins transformers>=4.54.0,<=4.56.2) forces for Qwen2VLImageProcessor when torchvision is
     present (image_processing_auto.py FORCE_FAST_IMAGE_PROCESSOR), written out in torch:
     uint8 -> float, bicubic antialiased resize (torchvision's tensor resize calls
     torch.nn.functional.interpolate), rescale and normalise, and the patchify
     reshape/permute/contiguous (image_processing_qwen2_vl_fast.py's steps). torchvision itself
     is not installed in this venv.

Where EasyR1 runs them inside the timed step (the `step` timer of ray_trainer.py `fit`):
- the dataloader's own processing (RLHFDataset.__getitem__) runs in 8 DataLoader workers that
  prefetch whole batches (data_loader.py num_workers=8): outside the step, not counted;
- each rollout worker runs process_image on its share of the prompts
  (vllm_rollout_spmd.py `_process_multi_modal_data`), and vLLM's input processor runs the HF
  processor once a prompt (n = 5 rides in SamplingParams; disable_mm_preprocessor_cache);
- each actor worker runs process_image + the image processor once per distinct prompt (uid) of
  its share (fsdp_workers.py `_process_multi_modal_inputs`, cached across the old, ref and
  update calls of one step while the uids stay the same), serially before its first pass.
"""

from __future__ import annotations

import io
import platform
import time
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageDraw

MIN_PIXELS = 262_144  # EasyR1 examples/config.yaml data.min_pixels @8460e817
MEAN = (0.48145466, 0.4578275, 0.40821073)  # OPENAI_CLIP_MEAN, Qwen2-VL's processor
STD = (0.26862954, 0.26130258, 0.27577711)


def diagram_png() -> bytes:
    img = Image.new("RGB", (400, 300), "white")
    draw = ImageDraw.Draw(img)
    for i in range(12):
        draw.line([(i * 30, 10), (390 - i * 20, 290)], fill="black", width=2)
    draw.ellipse([120, 80, 280, 240], outline="black", width=2)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def process_image(png: bytes) -> Image.Image:
    """EasyR1's process_image for an image below min_pixels."""
    im = Image.open(io.BytesIO(png))
    im.load()
    f = (MIN_PIXELS / (im.width * im.height)) ** 0.5
    im = im.resize((int(im.width * f), int(im.height * f)))
    return im.convert("RGB")


def fast_ops(im: Image.Image) -> object:
    """The torchvision processor's steps for one image, in torch (resize to 504 x 504)."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.array(im)).permute(2, 0, 1).unsqueeze(0).float()
    x = F.interpolate(x, size=(504, 504), mode="bicubic", antialias=True, align_corners=False)
    x = x.clamp_(0, 255) / 255.0
    x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    x = x.repeat(2, 1, 1, 1)  # temporal_patch_size 2
    g = 504 // 14
    x = x.view(1, 2, 3, g // 2, 2, 14, g // 2, 2, 14)
    return x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(g * g, 3 * 2 * 14 * 14).contiguous()


def timed_ms(fn: Callable[[], object], n: int = 20, rounds: int = 5) -> float:
    """Milliseconds a call: burn-in, then the best of `rounds` rounds of `n` calls (the
    machine is shared; the best round is the least disturbed)."""
    for _ in range(3):  # burn-in
        fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n * 1e3)
    return best


def main() -> None:
    import torch

    torch.set_num_threads(1)
    png = diagram_png()
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"one thread; PNG {len(png):,} bytes")
    base = timed_ms(lambda: process_image(png))
    print(f"process_image (decode + scale to {MIN_PIXELS:,} px): {base:.1f} ms")
    print(f"  + fast processor's ops (torch): {timed_ms(lambda: fast_ops(process_image(png))):.1f}"
          " ms an image")
    try:
        from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as slow_mod
        slow = slow_mod.Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12_845_056)
    except ImportError:
        from transformers import Qwen2VLImageProcessor as slow  # type: ignore[assignment]
        slow = slow(min_pixels=3136, max_pixels=12_845_056)
    grid = slow(images=[process_image(png)], return_tensors="np")["image_grid_thw"].tolist()
    ms = timed_ms(lambda: slow(images=[process_image(png)], return_tensors="np"))
    print(f"  + {type(slow).__name__} (PIL/numpy, grid {grid}): {ms:.1f} ms an image")


if __name__ == "__main__":
    main()
