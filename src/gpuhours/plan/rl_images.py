"""A vision-language RL step's images outside the trainer's own passes (issue 13): the rollout
engine's vision tower at prefill, and the host's preparation of each image inside the step.

The engine's tower. A vLLM engine runs the policy's vision tower on each prompt's images when
it prefills the prompt (vLLM's qwen2_5_vl.py: the image's patches through the ViT and its
merger, the output placed at the image tokens); the tower's linear layers are split over the
engine's tensor-parallel GPUs like the decoder's (its Qwen2_5_VisionAttention and MLP build
QKV/Column/RowParallelLinear layers). With `n` responses a prompt (EasyR1 passes `n` in
SamplingParams: verl/workers/rollout/vllm_rollout_spmd.py @8460e817), vLLM V1 processes the
prompt once and fans it out to `n` child requests that share its inputs and their image hashes
(the hashes are taken whenever prefix caching is on: V1 processor.py `use_hash = not
disable_mm_preprocessor_cache or enable_prefix_caching`; read in V1 code of the 0.8-0.10
releases, not line by line in 0.10.0, the release EasyR1's Dockerfile installs); the
scheduler caches each full KV block as it allocates it (kv_cache_manager.py `allocate_slots`
-> `cache_blocks`), so the siblings find the prompt's blocks, image tokens included, already
computed and schedule no encoder input for them. The tower therefore runs once a prompt, not
once a response: prompts per engine x the tower's forward FLOPs an image (estimate/vision.py),
at the GEMM efficiency of the tower's width, like the scoring passes' tower
(plan/rl_scoring.py vision_scoring_s).

The host's preparation (`image_prep_by_workers`). EasyR1 keeps each prompt's images in the
batch as the dataset holds them (PNG bytes: verl/utils/dataset.py `multi_modal_data`) and
prepares them again on the workers inside the step's timer, serially, one process a GPU:

- each rollout worker opens and scales every image of its engine's prompts
  (vllm_rollout_spmd.py `_process_multi_modal_data` -> dataset.py `process_image`: decode,
  scale up to data.min_pixels, RGB), and vLLM's input processor runs the HF image processor on
  each prompt once (resize to multiples of 28, rescale, normalise, patchify). Every GPU of a
  tensor-parallel engine runs the engine's whole batch (SPMD: each calls `generate` with the
  gathered prompts, fsdp_vllm.py `preprocess_data`);
- each actor worker does both for every distinct prompt (uid) among its share of the batch
  before its first scoring pass (fsdp_workers.py `_process_multi_modal_inputs`, which keeps the
  result for the reference pass and the update while the uids stay the same). The driver
  reorders the batch by sequence length before (ray_trainer.py `_balance_batch`), which
  scatters a prompt's responses over the ranks; taken as independent of the prompt, a rank
  holds `distinct_prompts_per_rank` prompts.

The dataloader's own processing (RLHFDataset.__getitem__ in 8 prefetching DataLoader workers,
data_loader.py) runs ahead of the step and is not counted. The cost an image is a measured
figure (assumptions.RL_IMAGE_PREP_S_PER_MEGAPIXEL, scripts/bench_image_processing.py).

Pure functions; seconds per GPU.
"""

from __future__ import annotations

from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate import assumptions as A
from gpuhours.plan.rl_driver import distinct_ranks
from gpuhours.setup import Training


def distinct_prompts_per_rank(prompts: float, generations: int, ranks: int) -> float:
    """Expected distinct prompts among one rank's share of a batch of `prompts` x
    `generations` sequences split evenly over `ranks` ranks after the length balancing: each
    prompt reaches rl_driver.distinct_ranks of the ranks (its sequences' ranks taken as
    independent of the prompt), so a rank holds prompts x that / ranks =
    prompts x (1 - (1 - 1/ranks)^generations). One rank holds them all; with one response a
    prompt, prompts / ranks."""
    if ranks < 1 or generations < 1:
        raise ValueError(f"ranks and generations must be at least 1, got {ranks}, {generations}")
    return prompts * distinct_ranks(generations, ranks) / ranks


def image_prep_s(images: float, pixels_per_image: float, s_per_megapixel: float) -> float:
    """Seconds one host process spends preparing `images` images of `pixels_per_image` pixels
    one after another (decode, scale, the HF image processor), at `s_per_megapixel`."""
    return images * pixels_per_image / 1e6 * s_per_megapixel


def engine_tower_s(prompts_per_engine: float, images_per_prompt: int,
                   tower_flops_per_image: float, tensor_parallel: int,
                   flops_per_s: float) -> float:
    """Seconds of an engine's vision tower over its prompts' images at prefill, per GPU: once a
    prompt (its `n` responses share the prompt's cached blocks), the tower's forward FLOPs
    split over the engine's `tensor_parallel` GPUs, at `flops_per_s` (peak x GEMM efficiency)."""
    if tensor_parallel < 1 or flops_per_s <= 0:
        raise ValueError(f"tensor_parallel must be at least 1 and the rate positive, got "
                         f"{tensor_parallel}, {flops_per_s}")
    return prompts_per_engine * images_per_prompt * tower_flops_per_image / (
        tensor_parallel * flops_per_s)


def engine_images_s(t: Training, gpu: GpuSpec, precision: str, prompts_per_engine: float,
                    tensor_parallel: int, prep: bool, tower_runs_per_prompt: int = 1
                    ) -> tuple[float, float]:
    """(tower seconds, host preparation seconds) per GPU of an engine's rollout of
    `prompts_per_engine` prompts of setup `t` (0, 0 without images): `engine_tower_s` at the
    GEMM efficiency of the tower's width, `tower_runs_per_prompt` times a prompt (1 for vLLM
    and SGLang, whose responses share the prompt's cached blocks; G for HF generate, which
    expands pixel_values with num_return_sequences), and with `prep` (`image_prep_by_workers`)
    every image of the engine's prompts prepared once on each of its GPUs' hosts
    (`image_prep_s`)."""
    grid, v = t.image_grid, t.arch.vision
    if grid is None or v is None:
        return 0.0, 0.0
    from gpuhours.estimate.timing import gemm_efficiency, peak_flops
    from gpuhours.estimate.vision import vision_forward_flops

    rate = peak_flops(gpu, precision) * gemm_efficiency(gpu, v.hidden_size)
    tower_s = engine_tower_s(prompts_per_engine * tower_runs_per_prompt, t.images_per_example,
                             vision_forward_flops(v, grid).total, tensor_parallel, rate)
    prep_s = (image_prep_s(prompts_per_engine * t.images_per_example, image_pixels(t),
                           A.RL_IMAGE_PREP_S_PER_MEGAPIXEL.value) if prep else 0.0)
    return tower_s, prep_s


def image_pixels(t: Training) -> float:
    """Pixels of one prepared image of setup `t`: its image_pixels, else its patches' pixels."""
    assert t.image_grid is not None and t.arch.vision is not None
    return float(t.image_pixels or t.image_grid.patches * t.arch.vision.patch_size ** 2)


def actor_image_prep_s(t: Training, prompts: float, generations: int, ranks: int) -> float:
    """Seconds each actor worker spends preparing the images of the distinct prompts of its
    share (`distinct_prompts_per_rank`) before its first scoring pass (0 without images)."""
    if t.image_grid is None or t.arch.vision is None:
        return 0.0
    return image_prep_s(distinct_prompts_per_rank(prompts, generations, ranks)
                        * t.images_per_example, image_pixels(t),
                        A.RL_IMAGE_PREP_S_PER_MEGAPIXEL.value)


def validation_dataset_prep_s(t: Training, prompts: int) -> float:
    """Seconds a validation pass waits for its dataset's images (0 without images): the
    trainer iterates the validation dataloader inside the step (EasyR1 @8460e817
    ray_trainer.py `_validate`: `for batch_dict in self.val_dataloader`), a fresh iterator each
    pass, and one DataLoader worker builds each batch, calling the dataset's __getitem__ (the
    image's decode, scaling and processor) for every example of it in turn; EasyR1's
    val_batch_size (1,024, examples/config.yaml) holds Geometry3k's 601 test prompts in one
    batch, so all `prompts` prompts' images are prepared one after another: a validation set
    larger than one batch would have several workers preparing batches at once (an upper end
    there). Counted where the phase's workers prepare the images (`image_prep_by_workers`)."""
    if t.image_grid is None or t.arch.vision is None:
        return 0.0
    return image_prep_s(prompts * t.images_per_example, image_pixels(t),
                        A.RL_IMAGE_PREP_S_PER_MEGAPIXEL.value)
