"""accelerate's hooks under `device_map`, counted and timed on a tiny model on the CPU: the host work
a decode step of transformers' generate adds when the model is split over several GPUs by
`device_map="auto"` (estimate/device_map.py; docs/generation.md, "Several GPUs by device_map").

    pip install --no-deps --target DIR transformers==4.46.0 huggingface_hub==0.26.2 \
        tokenizers==0.20.3 accelerate==1.0.1
    PYTHONPATH=DIR python -m gpuhours_dev.validation.device_map_hooks     (from scripts/,
        with DIR first on the path)

The model is dispatched as transformers' `from_pretrained(device_map=...)` dispatches it
(accelerate's `dispatch_model` with `skip_keys=model._skip_keys_device_placement`), on a
device map whose every entry is "cpu" (one entry per top-level block: the embedding, each
decoder layer, the final norm, the rotary embedding, the LM head) and `force_hooks=True`:
the hooks are the ones a map over several GPUs attaches (accelerate 1.0.1 hooks.py
`attach_align_device_hook_on_blocks`: an AlignDevicesHook on each block of the map, then
`attach_execution_device_hook` on every submodule below it with a state dict), and each moves
its inputs with `send_to_device`, here to the device they are already on, as it does on a GPU
for every block but the first of each GPU.

Printed: the hooked modules (all and per decoder layer), the hook calls and `.to` calls of one
decode step, the aten operators of a step with and without the hooks (TorchDispatchMode: a
`.to` to the tensor's own device dispatches none), and the host time per step with and
without them (median of many steps, after a warm-up), as time per hook call and in units of
the step's own time per aten operator on this host.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

#: tiny config, as hf_op_count's
_COMMON: dict[str, Any] = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=80, max_position_embeddings=64)


def _model(layers: int, hooked: bool) -> Any:
    import torch
    import transformers
    from accelerate import dispatch_model

    cfg = transformers.Qwen2Config(num_hidden_layers=layers, **_COMMON)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa").eval()
    if hooked:
        device_map = {"model.embed_tokens": "cpu",
                      **{f"model.layers.{i}": "cpu" for i in range(layers)},
                      "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
        dispatch_model(model, device_map=device_map, main_device="cpu", force_hooks=True,
                       skip_keys=model._skip_keys_device_placement)
    return model


def _step_inputs(model: Any) -> tuple[Any, Any]:
    import torch
    import transformers

    with torch.no_grad():
        cache = model(torch.randint(0, 80, (1, 5)), use_cache=True,
                      past_key_values=transformers.DynamicCache()).past_key_values
    return cache, torch.randint(0, 80, (1, 1))


def count(layers: int) -> dict[str, int]:
    """Hooked modules, hook calls, `.to` calls and aten operators of one decode step."""
    import accelerate.hooks
    import torch

    from gpuhours.torchkit.ops import count_dispatched

    model = _model(layers, hooked=True)
    hooked = sum(hasattr(m, "_hf_hook") for m in model.modules())
    calls = {"hooks": 0, "to": 0}
    pre = accelerate.hooks.AlignDevicesHook.pre_forward
    to = torch.Tensor.to

    def counted_pre(self: Any, module: Any, *args: Any, **kwargs: Any) -> Any:
        calls["hooks"] += 1
        return pre(self, module, *args, **kwargs)

    def counted_to(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["to"] += 1
        return to(self, *args, **kwargs)

    def ops(m: Any) -> int:
        cache, ids = _step_inputs(m)
        with torch.no_grad():
            return count_dispatched(lambda: m(ids, past_key_values=cache, use_cache=True))

    hooked_ops = ops(model)
    cache, ids = _step_inputs(model)
    accelerate.hooks.AlignDevicesHook.pre_forward = counted_pre  # type: ignore[method-assign]
    torch.Tensor.to = counted_to  # type: ignore[method-assign,assignment]
    try:
        with torch.no_grad():
            model(ids, past_key_values=cache, use_cache=True)
    finally:
        accelerate.hooks.AlignDevicesHook.pre_forward = pre  # type: ignore[method-assign]
        torch.Tensor.to = to  # type: ignore[method-assign]
    return {"hooked_modules": hooked, "hook_calls": calls["hooks"], "to_calls": calls["to"],
            "ops_hooked": hooked_ops, "ops_plain": ops(_model(layers, hooked=False))}


def _round_s(model: Any, steps: int) -> float:
    """Median host time of `steps` decode steps (the cache cropped back after each, so the
    context stays short), after a warm-up."""
    import torch

    cache, ids = _step_inputs(model)
    times = []
    with torch.no_grad():
        for _ in range(20):
            model(ids, past_key_values=cache, use_cache=True)
            cache.crop(5)
        for _ in range(steps):
            t = time.perf_counter()
            model(ids, past_key_values=cache, use_cache=True)
            times.append(time.perf_counter() - t)
            cache.crop(5)
    return statistics.median(times)


def step_s(layers: int, steps: int = 400, rounds: int = 7) -> tuple[list[float], list[float]]:
    """Per round, the median step of the plain model and of the hooked one, the rounds
    interleaved so that a load on the machine falls on both alike."""
    plain_model, hooked_model = _model(layers, hooked=False), _model(layers, hooked=True)
    plain, hooked = [], []
    for _ in range(rounds):
        plain.append(_round_s(plain_model, steps))
        hooked.append(_round_s(hooked_model, steps))
    return plain, hooked


def main() -> None:
    import accelerate
    import torch
    import transformers

    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, accelerate {accelerate.__version__}, "
          f"torch {torch.__version__}, Qwen2 tiny config, SDPA, batch 1, one decode step")
    two, four = count(2), count(4)
    for name in two:
        per_layer = (four[name] - two[name]) / 2
        print(f"  {name}: {two[name]} (2 layers), {four[name]} (4 layers): {per_layer:g} per "
              f"decoder layer, {two[name] - 2 * per_layer:g} outside the layers")
    layers = 8
    plain, hooked = step_s(layers)
    c = count(layers)
    print(f"  {layers} layers, {len(plain)} interleaved rounds: step {statistics.median(plain) * 1e6:.0f} "
          f"us plain (rounds {min(plain) * 1e6:.0f}-{max(plain) * 1e6:.0f}), "
          f"{statistics.median(hooked) * 1e6:.0f} us hooked "
          f"(rounds {min(hooked) * 1e6:.0f}-{max(hooked) * 1e6:.0f})")
    for name, pick in (("medians", statistics.median), ("minima", min)):
        extra = pick(hooked) - pick(plain)
        per_op = pick(plain) / c["ops_plain"]
        print(f"  by the rounds' {name}: {per_op * 1e6:.2f} us per aten operator "
              f"({c['ops_plain']} a step plain); {extra / c['hook_calls'] * 1e6:.2f} us per "
              f"hook call ({c['hook_calls']} calls) = {extra / c['hook_calls'] / per_op:.2f} "
              "operators' time")


if __name__ == "__main__":
    main()
