"""DeepSpeed ZeRO-3's optimizer step on the GPU: one sub group of the partition at a time.

DeepSpeed's stage-3 optimizer (deepspeed/runtime/zero/stage3.py @ v0.12.3, 6ea44d02c, the
release line of late 2023; the same steps in v0.10.0-v0.12.6) cuts each parameter group's partitions into
sub groups (`_create_fp16_sub_groups`: whole parameters until their count reaches
`zero_optimization.sub_group_size`, DeepSpeed's default 1e9 elements in
runtime/zero/config.py, the figure Qwen's finetune/ds_config_zero3.json sets too) and steps
them in turn (`step`):

- `_prepare_fp32_grad_for_sub_group` flattens the sub group's gradient partitions (a copy in
  the gradients' dtype: the model's under ZeRO, engine.get_data_types) and casts the copy to
  fp32 (`.to(fp32_partitioned_groups_flat[i].dtype)`): grad bytes + 4 per element at once;
- `_optimizer_step` steps that one flat fp32 tensor (it sets the param group's params to
  `[fp32_param]`), so the optimizer's temporaries are that tensor's: 4 bytes per element per
  set (torch's foreach AdamW; none for DeepSpeed's FusedAdam, the optimizer the engine builds
  for a config's "optimizer": {"type": "AdamW"} block, engine._configure_basic_optimizer);
- `_release_sub_group` drops the fp32 gradient before the next sub group.

The step's working set is therefore one sub group's, not the partition's. A sub group closes
at the parameter that reaches the size, so the largest is up to one parameter's partition
larger than `sub_group_size` (Qwen-1.8B on one GPU: the embedding and 14 layers, 1.02e9):
taken here as min(partition, sub_group_size), an understatement of less than one parameter.
"""

#: DeepSpeed's default `zero_optimization.sub_group_size`, elements (runtime/zero/config.py
#: @ v0.12.3: `sub_group_size: int = Field(pp_int(1e9), ge=0)`); Qwen's ds_config_zero3.json and
#: transformers' ZeRO-3 example configuration set the same
DEEPSPEED_SUB_GROUP_ELEMENTS = 1e9

#: bytes per element of the fp32 flat gradient and of each optimizer temporary set
_FP32_BYTES = 4.0


def deepspeed_zero3_step_bytes(partition_elements: float, grad_bytes_per_element: float,
                               optimizer_temporary_sets: int,
                               sub_group_elements: float = DEEPSPEED_SUB_GROUP_ELEMENTS) -> float:
    """Bytes DeepSpeed ZeRO-3's step holds on top of the resident state (weights, gradient
    partitions, fp32 masters, moments): the larger of one sub group's flattened gradient copy
    with its fp32 cast (grad_bytes_per_element + 4 per element) and its fp32 gradient with the
    optimizer's temporaries (4 + 4 x optimizer_temporary_sets per element). The sub group is
    min(partition_elements, sub_group_elements) elements (module docstring)."""
    if partition_elements <= 0:
        return 0.0
    elements = min(partition_elements, sub_group_elements)
    per_element = max(grad_bytes_per_element + _FP32_BYTES,
                      _FP32_BYTES * (1 + optimizer_temporary_sets))
    return elements * per_element


def deepspeed_zero3_sub_groups(partition_elements: list[int],
                               sub_group_elements: float = DEEPSPEED_SUB_GROUP_ELEMENTS
                               ) -> list[int]:
    """The sub groups' sizes, elements, of one parameter group whose parameters' partitions
    are `partition_elements` in parameter order: stage3.py @ v0.12.3
    `_create_fp16_sub_groups` adds whole parameters until the running count reaches
    `sub_group_elements` (>=) or the group ends; one sub group when the group is no larger."""
    total = sum(partition_elements)
    if not partition_elements or sub_group_elements >= total:
        return [total] if partition_elements else []
    groups: list[int] = []
    running = 0
    for n in partition_elements:
        running += n
        if running >= sub_group_elements:
            groups.append(running)
            running = 0
    if running:
        groups.append(running)
    return groups


def hf_auto_reduce_bucket_elements(hidden_size: int) -> int:
    """`zero_optimization.reduce_bucket_size` as transformers fills "auto" (Qwen's
    ds_config_zero3.json sets it so): hidden_size x hidden_size elements
    (transformers/deepspeed.py @ v4.32.0, HfTrainerDeepSpeedConfig.trainer_config_finalize;
    integrations/deepspeed.py later). ZeRO-3 allocates it once, in the model's dtype
    (stage3.py `__ipg_bucket_flat_buffer`, with contiguous_gradients, its default)."""
    return hidden_size * hidden_size
