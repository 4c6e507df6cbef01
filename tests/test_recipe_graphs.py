"""The CUDA graph scopes the Megatron-Bridge rows take from their recipes
(scripts/gpuhours_dev/validation/recipe_graphs.py): the data file against a hand reading of the
recipes, and the matching of a row to its recipe."""

from __future__ import annotations

from gpuhours_dev.validation.recipe_graphs import (
    recipe_graph_scope,
    recipe_op_fuser,
    recipe_op_fusers,
    recipe_recompute,
    recipe_recomputes,
    recipe_scopes,
)


def test_the_recipes_read_as_their_files_say() -> None:
    # read by hand in NVIDIA-NeMo/Megatron-Bridge@067f987d src/megatron/bridge/perf_recipes/
    scopes = recipe_scopes()
    # llama/gb200/llama3.py: cuda_graph_impl "local", cuda_graph_scope ["full_iteration"]
    assert scopes["llama3_8b_pretrain_8gpu_gb200_bf16_config"][0] == "full_iteration"
    # ... the 70B LoRA recipe: "transformer_engine" with ["mlp"]; the 8B SFT recipe sets
    # ["mlp"] with cuda_graph_impl "none": no graphs
    assert scopes["llama3_70b_peft_8gpu_gb200_bf16_config"][0] == "mlp"
    assert scopes["llama3_8b_sft_8gpu_gb200_bf16_config"][0] == "none"
    # ... the 70B pretrain recipe sets nothing (the base recipe's "none") and tp 1, mbs 1,
    # gbs 256
    scope, path, layout = scopes["llama3_70b_pretrain_64gpu_gb200_bf16_config"]
    assert scope == "none" and path == "llama/gb200/llama3.py"
    assert (layout["tensor"], layout["micro"], layout["global"]) == (1, 1, 256)
    # qwen/gb200/qwen3_moe.py: bf16 "transformer_engine" with ["attn", "moe_router",
    # "moe_preprocess"]; MXFP8 through _enable_hybridep_full_iteration_mxfp8: "full_iteration"
    assert scopes["qwen3_30b_a3b_pretrain_8gpu_gb200_bf16_config"][0] == \
        "attn,moe_router,moe_preprocess"
    assert scopes["qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"][0] == "full_iteration"
    # ... the 32-GPU recipe is the 8-GPU one at a global batch of 2048
    # (_with_global_batch_size): its graphs, its new batch
    scope, _, layout = scopes["qwen3_30b_a3b_pretrain_32gpu_gb200_bf16_config"]
    assert scope == "attn,moe_router,moe_preprocess" and layout["global"] == 2048


def test_a_row_takes_the_scope_of_the_recipe_with_its_layout() -> None:
    # Qwen3-30B-A3B MXFP8 on 8 GB200 at ep 8, micro-batch 4, global 512: the fp8mx recipe's
    same = {"tensor": 1, "pipeline": 1, "context": 1, "expert": 8, "micro": 4, "global": 512}
    scope, note = recipe_graph_scope("qwen3-30b-a3b", "gb200", 8, "MXFP8", "pretrain", same)
    assert scope == ("full_iteration",) and "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx" in note
    # the same model at micro-batch 1 (an older release's layout): not its recipe
    older = {**same, "micro": 1}
    scope, note = recipe_graph_scope("qwen3-30b-a3b", "gb200", 8, "MXFP8", "pretrain", older)
    assert scope is None and "sets another layout" in note and "ungraphed" in note
    # plain "FP8" takes the fp8 recipes that set the row's layout: of the 70B LoRA's fp8cs
    # (pp 2) and fp8mx (pp 4) recipes, the fp8cs one: mlp
    lora = {"tensor": 1, "pipeline": 2, "context": 1, "vp": 20, "micro": 1, "global": 32}
    scope, note = recipe_graph_scope("llama-3-70b", "gb200", 8, "FP8", "peft", lora)
    assert scope == ("mlp",)
    # no recipe for the GPU count: ungraphed, said so
    scope, note = recipe_graph_scope("llama-3-70b", "h100", 32, "FP8", "pretrain", lora)
    assert scope is None and "no Megatron-Bridge recipe" in note
    # a recipe without graphs: none, and the setup names it
    scope, note = recipe_graph_scope("llama-3-70b", "gb200", 64, "BF16", "pretrain",
                                     {"tensor": 1, "micro": 1, "global": 256})
    assert scope is None and note.startswith("no CUDA graphs (llama/gb200/llama3.py")


def test_the_op_fuser_reads_as_the_recipes_say() -> None:
    # read by hand at Megatron-Bridge@067f987d: perf_recipes/_common.py _benchmark_common turns
    # use_transformer_engine_op_fuser off; gpt_oss/common.py
    # _apply_gpt_oss_120b_full_iter_fp8mx_configs, called after it by the GB200 and GB300
    # MXFP8 recipes, turns it on; the BF16 recipes and the B300 MXFP8 one never do
    fusers = recipe_op_fusers()
    assert fusers["gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config"]
    assert fusers["gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config"]
    assert not fusers["gpt_oss_120b_pretrain_64gpu_gb300_bf16_config"]
    assert not fusers["gpt_oss_120b_pretrain_64gpu_b300_fp8mx_config"]
    assert not fusers["gpt_oss_120b_pretrain_64gpu_h100_bf16_config"]
    # qwen/common.py _enable_hybridep_full_iteration_mxfp8 (after _benchmark_common) sets it
    assert fusers["qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"]
    # a row takes it only from the recipe of its own layout
    layout = {"tensor": 1, "pipeline": 1, "context": 1, "expert": 16, "micro": 4,
              "global": 1280}
    assert recipe_op_fuser("gpt-oss-120b", "gb300", 64, "MXFP8", "pretrain", layout)
    assert not recipe_op_fuser("gpt-oss-120b", "gb300", 64, "MXFP8", "pretrain",
                               {**layout, "expert": 64})
    assert not recipe_op_fuser("gpt-oss-120b", "gb300", 64, "BF16", "pretrain",
                               {**layout, "expert": 64})


def test_the_selective_recomputation_reads_as_the_recipes_say() -> None:
    # gpt_oss/b200/gpt_oss.py, gb200 bf16 and h100: recompute_modules ["layernorm", "moe_act"]
    # with recompute_granularity "selective"; gb300 bf16 sets none
    layout = {"tensor": 1, "pipeline": 1, "context": 1, "expert": 8, "micro": 4,
              "global": 1280}
    modules, note = recipe_recompute("gpt-oss-120b", "b200", 64, "BF16", "pretrain", layout)
    assert modules == ("layernorm", "moe_act") and "selective" in note
    assert recipe_recompute("gpt-oss-120b", "gb300", 64, "BF16", "pretrain",
                            {**layout, "expert": 64}) == (None, "")
    # a module the estimator does not model (DeepSeek's mla_up_proj) is left out, said so
    found = {name: mods for name, mods in recipe_recomputes().items() if "mla_up_proj" in mods}
    assert found
