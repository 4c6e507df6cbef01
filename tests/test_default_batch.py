"""The default global batch of the setup chooser and the plain-question pretraining rows (issue 16):
the size rule worked by hand, the chooser reaching it (or the batch the user gave), the published
runs mapped to the question as their sources state, and the goal counts computed from the rows."""

from __future__ import annotations

import csv
import re
from importlib import resources

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import standard_shape
from gpuhours.estimate.fit import chosen_setup, default_global_batch, fit
from gpuhours.setup import Hardware, Training
from gpuhours_dev.validation import Comparison
from gpuhours_dev.validation.at_scale import (
    GPU_COUNT_RULE,
    PLAIN_KIND,
    plain_runs,
    plain_summary,
    render_plain,
)
from gpuhours_dev.validation.report import summary


@pytest.mark.parametrize(("model", "seq", "sequences"), [
    ("gpt2", 1024, 512),            # 124M: GPT-3's 0.5M tokens = 2^19 / 1024
    ("llama-3.2-1b", 2048, 512),    # 1.24B: 1M tokens = 2^20 / 2048
    ("llama-2-7b", 4096, 1024),     # 6.7B: Llama 2's 4M tokens = 2^22 / 4096 (its 1,024 seqs)
    ("llama-2-70b", 4096, 1024),
    ("qwen3-30b-a3b", 4096, 1024),  # MoE: by all 30.5B parameters, not the 3.3B active
    ("qwen3-0.6b", 2**20, 1),       # 0.5 sequence rounds to at least one
])
def test_default_global_batch_by_hand(model, seq, sequences):
    n, basis = default_global_batch(Training(model=model, seq_len=seq))
    assert n == sequences
    assert "tokens per step" in basis


def test_default_global_batch_of_a_405b_is_llama_3s_16m_tokens():
    arch = standard_shape(405e9, name="405b")
    n, basis = default_global_batch(Training(arch=arch, seq_len=8192))
    assert n == 2**24 // 8192 == 2048
    assert "Llama 3 405B" in basis


def test_default_global_batch_of_a_175b_is_the_dense_175b_runs_4m_tokens():
    """GPT-3 175B took 3.2M tokens a step, OPT-175B 2M, BLOOM 2,048 x 2,048: not 405B's 16M."""
    arch = standard_shape(175e9, name="175b")
    n, basis = default_global_batch(Training(arch=arch, seq_len=2048))
    assert n == 2**22 // 2048 == 2048
    assert "OPT-175B" in basis


def test_the_size_classes_are_the_published_recipes():
    tokens = {k: a.value for k, a in A.DEFAULT_GLOBAL_BATCH_TOKENS.items()}
    # GPT-3 table 2.1 (0.5M, 1M), LLaMA / Llama 2 (4M), the 175B-280B dense runs (2M-6M: 4M),
    # Llama 3 405B (16M)
    assert tokens == {1e9: 2**19, 6e9: 2**20, 100e9: 2**22, 300e9: 2**22,
                      float("inf"): 2**24}
    assert all(a in A.all_assumptions() for a in A.DEFAULT_GLOBAL_BATCH_TOKENS.values())


def test_the_chooser_makes_the_default_batch():
    t, hw = Training(model="llama-2-70b", seq_len=4096), Hardware(gpu="a100-80gb", num_gpus=64)
    found = chosen_setup(t, hw)
    assert found is not None
    chosen, why = found
    dp = 64 // (chosen.tp * chosen.pp * chosen.cp)
    # 1,024 sequences over 64 data-parallel GPUs: 16 each, as micro-batch x accumulation
    assert chosen.micro_batch * chosen.grad_accum * dp == 1024
    assert "global batch 1024 sequences of 4096 (4.19M tokens) for a target of 1024" in why
    assert "LLaMA table 2" in why


def test_more_gpus_than_sequences_takes_a_layout_that_makes_the_batch():
    t, hw = Training(model="llama-2-7b", seq_len=4096), Hardware(gpu="a100-80gb", num_gpus=2048)
    found = chosen_setup(t, hw, search_layouts=True)
    assert found is not None
    chosen, _ = found
    mp = chosen.tp * chosen.pp * chosen.cp
    assert mp >= 2  # 2,048 ranks cannot share 1,024 sequences
    assert chosen.micro_batch * chosen.grad_accum * (2048 // mp) == 1024


def test_a_batch_or_accumulation_the_user_gave_is_kept():
    hw = Hardware(gpu="a100-80gb", num_gpus=64)
    t = Training(model="llama-2-70b", seq_len=4096)
    found = chosen_setup(t, hw, global_batch=256)
    assert found is not None
    chosen, why = found
    assert chosen.micro_batch * chosen.grad_accum * 64 == 256  # 4 sequences per GPU
    assert "for a target of 256: given" in why
    found = chosen_setup(t.model_copy(update={"grad_accum": 3}), hw)
    assert found is not None and found[0].grad_accum == 3
    assert "global batch" not in found[1]


def test_batch_near_takes_the_nearest_multiple_of_the_ranks():
    t, hw = Training(model="llama-2-70b", seq_len=4096), Hardware(gpu="a100-80gb", num_gpus=64)
    best = fit(t, hw, batch_near=1000).fastest
    assert best is not None
    # round(1000 / 64) = 16 sequences per rank: 1,024
    assert best.micro_batch * best.grad_accum * best.data_parallel == 1024


def _csv_rows(name: str) -> list[dict[str, str]]:
    text = resources.files("gpuhours_dev.validation").joinpath("data", name).read_text("utf-8")
    return list(csv.DictReader(text.splitlines()))


def test_the_rows_carry_the_figures_they_quote():
    """Each row's GPU hours and tokens are the figures of its quote ("1.46M", "~15 trillion",
    "2.664M ... 14.8T"), read back independently of the numeric columns."""
    for r in _csv_rows("pretraining_plain.csv"):
        quote = r["published_as"]
        millions = re.search(r"([\d.]+)M\b", quote)
        thousands = re.findall(r"([\d.]+)K GPU hours", quote)
        card_k = re.match(r"([\d.]+)k \(", quote)  # Llama 3.2's "370k (Training Time ...)"
        gpu_days = re.match(r"(\d+) GPUs x \"about ([\d.]+|half a) days?\"", quote)
        # Falcon's cards: "about two weeks", "two months", read as 14 and 60 days (the notes),
        # Falcon-RW-1B's "about six days"
        gpu_words = re.match(
            r"(\d+) GPUs x \"(?:about |roughly )?(two weeks|two months|six days)\"", quote)
        # model cards' "Training time: N days" (StarCoder, Phi; SantaCoder's 6.2), JetMoE's
        # "2 weeks", TinyStarCoderPy's "18 hours"
        card_days = re.match(
            r"(\d+) GPUs x \"(?:Training time: |approximately )?"
            r"(?:([\d.]+) days|(\d+) weeks|(\d+) hours)\"", quote)
        if millions:
            hours = float(millions.group(1)) * 1e6
        elif thousands:  # the DeepSeek-V2 sentence holds both rows' figures
            hours = next(float(x) * 1e3 for x in thousands
                         if float(x) * 1e3 == float(r["gpu_hours"]))
        elif card_k:
            hours = float(card_k.group(1)) * 1e3
        elif gpu_days:  # GPUs x days, each day 24 hours ("half a" day: 12)
            days = 0.5 if gpu_days.group(2) == "half a" else float(gpu_days.group(2))
            hours = int(gpu_days.group(1)) * days * 24
            assert f"{hours:,.0f} GPU hours" in quote
        elif card_days:
            if card_days.group(4):
                days = int(card_days.group(4)) / 24
            elif card_days.group(2):
                days = float(card_days.group(2))
            else:
                days = 7 * int(card_days.group(3))
            hours = int(card_days.group(1)) * days * 24
            assert f"{hours:,.0f} GPU hours" in quote
        elif gpu_words:
            days = {"two weeks": 14, "two months": 60, "six days": 6}[gpu_words.group(2)]
            hours = int(gpu_words.group(1)) * days * 24
            assert f"{hours:,.0f} GPU hours ({days} days)" in quote
        else:
            hours = float(re.sub(",", "", re.search(
                r"([\d,]{3,}) (?:compute hours|GPU-hours|A100 GPU hours|GPU hours)",
                quote).group(1)))
        assert hours == pytest.approx(float(r["gpu_hours"]))
        tokens = re.search(r"([\d.]+|each) ?(trillion|T|B) tokens", quote)
        count = 1.0 if tokens.group(1) == "each" else float(tokens.group(1))
        scale = 1.0 if tokens.group(2) == "B" else 1e3
        assert count * scale == pytest.approx(float(r["tokens_billion"]))
        # a pinned file, a paper, or a model card with the sentence quoted
        assert ("commit" in r["source"] or "arXiv" in r["source"]
                or ("model card" in r["source"] and '"' in r["source"]))


def test_the_runs_are_mapped_as_their_sources_state():
    runs = {r.label: r for r in plain_runs()}
    # 4 Llama 2 + Llama 3.1 8B/70B/405B + Llama 4 x 2 + DeepSeek-V3 + BLOOM + 4 LLaMA
    # + DeepSeek-V2 and DeepSeek LLM 67B (per trillion tokens) + Llama 3 8B/70B, Llama 3.2
    # 1B/3B, MPT-7B, MPT-1.3B, TinyLlama + the eight Pythia sizes + Falcon-7B/40B/180B
    # + OPT-175B; added on 2026-11-24: StarCoderBase, Phi-1.5, Phi-2, JetMoE-8B, Phi-3-mini
    # (two runs), Phi-3-medium, Phi-3.5-MoE, Phi-4-mini, Falcon2-11B, StableLM-3B-4E1T,
    # Falcon-Mamba-7B; added on 2026-11-25: Granite 3.0 2B, 8B, 1B-A400M, 3B-A800M, SmolLM3 3B,
    # Phi-3.5-mini, SantaCoder, StarCoderBase-1B, TinyStarCoderPy, Falcon-RW-1B
    assert len(runs) == 58
    # Pythia: the paper's table of GPU counts, A100-40GB, fp16, 299,892,736,000 tokens
    assert [runs[f"Pythia {s}"].num_gpus for s in ("70M", "160M", "410M", "1B", "1.4B", "2.8B",
                                                   "6.9B", "12B")] == [32] * 3 + [64] * 3 + [128, 256]
    assert {(r.gpu.name, r.precision, r.tokens, r.seq_len) for k, r in runs.items()
            if k.startswith("Pythia")} == {("a100-40gb", "fp16-mixed", 299_892_736_000, 2048)}
    assert [(runs[k].num_gpus, runs[k].tokens) for k in ("Falcon-7B", "Falcon-40B",
                                                         "Falcon-180B")] == [
        (384, 1.5e12), (384, 1e12), (4096, 3.5e12)]
    assert (runs["TinyLlama 1.1B (300B tokens)"].num_gpus, runs["MPT-7B"].num_gpus,
            runs["MPT-1.3B (200B tokens)"].num_gpus) == (16, 440, 440)
    assert runs["MPT-7B"].gpu.name == "a100-40gb" and runs["MPT-7B"].seq_len == 2048
    assert {k for k, r in runs.items() if r.moe} == {
        "Llama 4 Scout", "Llama 4 Maverick", "DeepSeek-V3", "DeepSeek-V2 (per trillion tokens)",
        "JetMoE-8B", "Phi-3.5-MoE 42B-A6.6B", "Granite 3.0 1B-A400M", "Granite 3.0 3B-A800M"}
    # the cards' GPU counts and types, as stated
    assert [(runs[k].num_gpus, runs[k].gpu.name) for k in (
        "StarCoderBase 15.5B (1T tokens)", "Phi-1.5 1.3B", "Phi-2 2.7B", "JetMoE-8B",
        "Phi-3-medium 14B", "Phi-4-mini 3.8B", "Falcon2-11B", "Falcon-Mamba-7B")] == [
        (512, "a100-80gb"), (32, "a100-40gb"), (96, "a100-80gb"), (96, "h100-sxm"),
        (512, "h100-sxm"), (512, "a100-80gb"), (1024, "a100-40gb"), (256, "h100-sxm")]
    ds = runs["DeepSeek-V3"]
    assert (ds.gpu.name, ds.num_gpus, ds.seq_len, ds.precision, ds.tokens) == (
        "h800", 2048, 4096, "fp8-mixed", 14.8e12)
    assert runs["Llama 3.1 405B"].num_gpus == 16384
    assert (runs["BLOOM 176B"].num_gpus, runs["BLOOM 176B"].network_gb_per_s) == (384, 6.25)
    assert "16K H100" in runs["Llama 3.1 405B"].gpus_basis
    # counts not stated: the rule, said
    assert runs["LLaMA 65B"].num_gpus == 2048 and "380 tokens/sec/GPU" in runs[
        "LLaMA 65B"].gpus_basis
    for name in ("Llama 2 7B", "Llama 3.1 8B", "Llama 4 Scout", "Llama 4 Maverick", "LLaMA 7B",
                 "Llama 3 8B", "Llama 3.2 1B"):
        assert runs[name].num_gpus == 2048 and runs[name].gpus_basis == GPU_COUNT_RULE
    from gpuhours.estimate.params import count_params

    # our count of the configs against the cards' totals (Scout's 109B holds its vision tower)
    for name, card_b, rel in (("Llama 3.1 405B", 405, 0.01), ("Llama 4 Maverick", 400, 0.01),
                              ("Llama 4 Scout", 109, 0.02), ("DeepSeek-V3", 671, 0.01),
                              ("BLOOM 176B", 176.247, 0.001),  # transformers' count of BLOOM
                              ("LLaMA 33B", 32.5, 0.01), ("LLaMA 65B", 65.2, 0.01),
                              ("DeepSeek-V2 (per trillion tokens)", 236, 0.01),
                              ("DeepSeek LLM 67B (per trillion tokens)", 67, 0.01),
                              # the README's 1.1B; the Llama 3.2 card's 1.23B and 3.21B
                              ("TinyLlama 1.1B (300B tokens)", 1.1, 0.01),
                              ("Llama 3.2 1B", 1.23, 0.01), ("Llama 3.2 3B", 3.21, 0.01),
                              # the card's 7.27B; transformers builds 7,272,665,088
                              ("Falcon-Mamba-7B", 7.27, 0.001)):
        assert count_params(runs[name].arch).total / 1e9 == pytest.approx(card_b, rel=rel)
    # Pythia: the suite's "Non-Embedding Params" column (EleutherAI/pythia-* model cards),
    # exactly: the total less embed_in and embed_out (vocab x d each, untied)
    for size, non_embedding in (("70M", 18_915_328), ("160M", 85_056_000),
                                ("410M", 302_311_424), ("1B", 805_736_448),
                                ("1.4B", 1_208_602_624), ("2.8B", 2_517_652_480),
                                ("6.9B", 6_444_163_072), ("12B", 11_327_027_200)):
        arch = runs[f"Pythia {size}"].arch
        embeddings = 2 * arch.vocab_size * arch.hidden_size
        assert count_params(arch).total - embeddings == non_embedding, size


def test_added_configs_count_as_worked_by_hand():
    """The configs added on 2026-11-24 (data/pretraining_models.json), counted here by hand from
    their shapes, match count_params and the cards' totals; the stand-ins differ from the real
    model by exactly the parts their source names."""
    from gpuhours.estimate.params import count_params

    runs = {r.label: r for r in plain_runs()}

    def total(label: str) -> int:
        return count_params(runs[label].arch).total

    def phi(d: int, f: int, layers: int, vocab: int = 51_200) -> int:
        # q, k, v, dense (d x d + bias each), fc1/fc2 with biases, one LayerNorm a layer;
        # embedding, untied head with bias, final LayerNorm
        layer = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * d
        return layers * layer + vocab * d + (vocab * d + vocab) + 2 * d

    assert total("Phi-1.5 1.3B") == phi(2048, 8192, 24) == 1_418_270_720  # transformers' count
    # the card's "1.3 billion" is the model without its untied head (1.313B)
    assert (phi(2048, 8192, 24) - 51_200 * 2048 - 51_200) / 1e9 == pytest.approx(1.3, rel=0.02)
    assert total("Phi-2 2.7B") == phi(2560, 10_240, 32) == 2_779_683_840
    # StarCoder: 48 query heads of 128 over one key/value head (multi-query), GELU MLP of 4d,
    # biases, two LayerNorms a layer, tied embedding; learned positions (8,192 x 6,144) left out
    d, f, kv = 6144, 24_576, 128
    layer = (d * d + d) + 2 * (d * kv + kv) + (d * d + d) + (d * f + f) + (f * d + d) + 4 * d
    starcoder = 40 * layer + 49_152 * d + 2 * d
    assert total("StarCoderBase 15.5B (1T tokens)") == starcoder
    assert starcoder + 8192 * d == 15_517_456_384  # transformers' GPTBigCode: the card's 15.5B
    # Phi-3.5-MoE: 16 SwiGLU experts of 6,400 and a router a layer, GQA 32/8 heads of 128
    d, f = 4096, 6400
    attn = 2 * d * d + 2 * d * 1024
    moe = 16 * 3 * d * f + 16 * d
    phimoe = 32 * (attn + moe + 2 * d) + 2 * 32_064 * d + d
    assert total("Phi-3.5-MoE 42B-A6.6B") == phimoe
    assert 41_872_793_600 - phimoe == 65 * d  # PhiMoE's LayerNorm biases (65 norms)
    active = 32 * (attn + 2 * 3 * d * f) + 2 * 32_064 * d
    assert active / 1e9 == pytest.approx(6.6, rel=0.01)  # the card: 6.6B active
    # JetMoE-8B stand-in: 32 query heads of 128 (two routed attention experts of 16) over 16
    # key/value heads, 8 SwiGLU experts of 5,632 top-2, tied embedding of 32,000
    d, f = 2048, 5632
    attn = 2 * d * 4096 + 2 * d * 2048
    jet = 24 * (attn + 8 * 3 * d * f + 8 * d + 2 * d) + 32_000 * d + d
    assert total("JetMoE-8B") == jet
    # the real model (transformers' JetMoe: 8,522,237,952) also holds the 6 unrouted attention
    # experts' q and o (d x d each) a layer; 20,480 a layer (0.006%) are JetMoE's own small
    # parts beyond that, its attention router (8 x d) among them
    assert 8_522_237_952 - (jet + 24 * 6 * 2 * d * d) == 24 * 20_480
    active_layers = 24 * (attn + 2 * 3 * d * f)  # the README's "2.2B active parameters"
    assert active_layers / 1e9 == pytest.approx(2.2, rel=0.03)
    # Falcon2-11B: fused qkv of (32 + 2 x 8) heads of 128, dense, MLP of 4d, no biases, one
    # LayerNorm a layer (parallel block); untied head
    d = 4096
    layer = d * 48 * 128 + d * d + 2 * d * 4 * d + 2 * d
    falcon2 = 60 * layer + 2 * 65_024 * d + 2 * d
    assert total("Falcon2-11B") == falcon2 == 11_102_822_400  # transformers' count; card: 11B
    # StableLM-3B-4E1T as a llama-type config: the card's 2,795,443,200 less 65 LayerNorm biases
    d, f = 2560, 6912
    stablelm = 32 * (4 * d * d + 3 * d * f + 2 * d) + 2 * 50_304 * d + d
    assert total("StableLM-3B-4E1T") == stablelm == 2_795_443_200 - 65 * d


def test_configs_added_on_2026_11_25_count_as_worked_by_hand():
    """Granite 3.0 (the report's table 1 shapes, vocabulary 49,155, tied embeddings), SmolLM3
    (huggingface/smollm stage1_8T.yaml), SantaCoder, StarCoderBase-1B, TinyStarCoderPy and
    Falcon-RW-1B, counted here by hand, match count_params and the
    published sizes (the report's 2.5B, 8.1B, 1.3B / 400M active, 3.3B / 800M active; SmolLM3's
    3B); the runs are mapped as the sources state."""
    from gpuhours.estimate.params import count_params

    runs = {r.label: r for r in plain_runs()}

    def dense(d: int, layers: int, heads: int, kv: int, f: int, vocab: int) -> int:
        # q and o (d x d), k and v (d x kv heads x head_dim), SwiGLU (3 d f), two RMSNorms a
        # layer; one tied embedding and the final norm
        head = d // heads
        return layers * (2 * d * d + 2 * d * kv * head + 3 * d * f + 2 * d) + vocab * d + d

    def moe(d: int, layers: int, heads: int, kv: int, f: int, experts: int, k: int,
            vocab: int) -> tuple[int, int]:
        # attention as dense; experts of SwiGLU width f and a router (d x experts), no bias
        head = d // heads
        attn = 2 * d * d + 2 * d * kv * head
        total = layers * (attn + experts * 3 * d * f + experts * d + 2 * d) + vocab * d + d
        active = layers * (attn + k * 3 * d * f)  # the blocks' routed top-k, no embedding
        return total, active

    def total(label: str) -> int:
        return count_params(runs[label].arch).total

    g2 = dense(2048, 40, 32, 8, 8192, 49_155)
    g8 = dense(4096, 40, 32, 8, 12_800, 49_155)
    assert total("Granite 3.0 2B") == g2 == 2_533_531_648
    assert total("Granite 3.0 8B") == g8 == 8_170_848_256
    assert (g2 / 1e9, g8 / 1e9) == (pytest.approx(2.5, rel=0.02), pytest.approx(8.1, rel=0.01))
    m1, a1 = moe(1024, 24, 16, 8, 512, 32, 8, 49_155)
    m3, a3 = moe(1536, 32, 24, 8, 512, 40, 8, 49_155)
    assert total("Granite 3.0 1B-A400M") == m1 and total("Granite 3.0 3B-A800M") == m3
    assert m1 / 1e9 == pytest.approx(1.3, rel=0.03) and m3 / 1e9 == pytest.approx(3.3, rel=0.01)
    # the report's "400M" and "800M" active: the blocks' weights a token passes through
    # (378M and 805M; with the tied embedding 428M and 881M)
    assert a1 / 1e9 == pytest.approx(0.4, rel=0.06) and a3 / 1e9 == pytest.approx(0.8, rel=0.01)
    smol = dense(2048, 36, 16, 4, 11_008, 128_256)
    assert total("SmolLM3 3B") == smol == 3_075_098_624  # the hub's "3.08B"
    # GPTBigCode (multi-query: one key/value head) as starcoder2-type stand-ins: LayerNorms,
    # biased GELU MLP of 4 x width, tied embedding; the learned positions left out
    def bigcode(d: int, layers: int, heads: int, vocab: int) -> int:
        kv = d // heads
        attn = (d * d + d) + 2 * (d * kv + kv) + (d * d + d)
        mlp = (d * 4 * d + 4 * d) + (4 * d * d + d)
        return layers * (attn + mlp + 4 * d) + vocab * d + 2 * d

    assert total("SantaCoder 1.1B") == bigcode(2048, 24, 16, 49_280)
    assert total("StarCoderBase-1B") == bigcode(2048, 24, 16, 49_152)
    assert total("TinyStarCoderPy 164M") == bigcode(768, 20, 12, 49_152)
    # with the positions they are the published sizes (transformers 5.23.0's GPTBigCode counts)
    assert total("SantaCoder 1.1B") + 2048 * 2048 == 1_124_886_528  # the card's 1.1B
    assert total("StarCoderBase-1B") + 8192 * 2048 == 1_137_207_296
    assert total("TinyStarCoderPy 164M") + 8192 * 768 == 164_144_128  # the card's 164M
    # Falcon-RW-1B: fused biased qkv of 3 x d, dense, biased MLP of 4d, two LayerNorms a layer
    # (sequential block), tied embedding: transformers' count of falcon-rw-1b
    d = 2048
    frw = 24 * ((d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
                + 4 * d) + 50_304 * d + 2 * d
    assert total("Falcon-RW-1B") == frw == 1_311_625_216
    # the sources' GPUs, tokens and sequences
    assert [(runs[k].num_gpus, runs[k].gpu.name, runs[k].tokens, runs[k].seq_len) for k in (
        "SantaCoder 1.1B", "StarCoderBase-1B", "TinyStarCoderPy 164M", "Falcon-RW-1B")] == [
        (96, "v100-32gb", 236e9, 2048), (128, "a100-80gb", 1e12, 8192),
        (32, "a100-80gb", 100e9, 8192), (32, "a100-40gb", 350e9, 2048)]
    assert runs["SantaCoder 1.1B"].precision == "fp16-mixed"
    assert [(runs[k].num_gpus, runs[k].tokens, runs[k].seq_len, runs[k].network_gb_per_s)
            for k in ("Granite 3.0 2B", "Granite 3.0 8B", "Granite 3.0 1B-A400M",
                      "Granite 3.0 3B-A800M", "SmolLM3 3B", "Phi-3.5-mini 3.8B")] == [
        (256, 12e12, 4096, 50.0), (768, 12e12, 4096, 50.0), (128, 10e12, 4096, 50.0),
        (256, 10e12, 4096, 50.0), (384, 11e12, 4096, 25.0), (512, 3.4e12, 4096, 25.0)]
    # SmolLM3's 384 GPUs are its config's dp 192 x tp 2; 24 days of them
    assert runs["SmolLM3 3B"].published_gpu_hours == 192 * 2 * 24 * 24
    assert runs["Phi-3.5-mini 3.8B"].published_gpu_hours == 512 * 10 * 24
    assert {runs[k].gpu.name for k in runs if k.startswith(("Granite 3.0", "SmolLM3",
                                                             "Phi-3.5-mini"))} == {"h100-sxm"}


def test_the_mfu_columns_divide_by_the_16_bit_peak_the_gpu_has():
    """bf16 where the catalog has it; a V100 (SantaCoder's) has no bf16, so its fp16 rate."""
    from gpuhours import catalog
    from gpuhours.estimate.timing import peak_flops
    from gpuhours_dev.validation.at_scale import mfu_reference_precision

    v100, h100 = catalog.gpu("v100-32gb"), catalog.gpu("h100-sxm")
    assert mfu_reference_precision(h100) == "bf16-mixed"
    assert mfu_reference_precision(v100) == "fp16-mixed"
    assert peak_flops(v100, mfu_reference_precision(v100)) == pytest.approx(125e12)


def _row(label: str, error: float, group: str = "dense") -> Comparison:
    return Comparison(PLAIN_KIND, label, 100.0, 100.0 * (1 + error), "GPU hours", "", "setup",
                      "src", implied_mfu=0.4, group=group)


def test_the_goal_counts_are_computed_from_the_rows():
    rows = [_row("a", 0.10), _row("b", -0.24), _row("c", 0.30, "MoE"), _row("d", 0.0, "MoE"),
            _row("e", -0.05)]
    # none of these labels is a run whose hours are unverified: "verified" counts them all
    assert plain_summary(rows) == {"all": (4, 5), "dense": (3, 3), "MoE": (1, 2),
                                   "verified": (4, 5)}
    assert summary(rows)[PLAIN_KIND] == (4, 5)
    text = "\n".join(render_plain(rows))
    assert "**4 of 5 within 25% (80%; goal 80%: met)**: dense 3 of 3, MoE 1 of 2" in text
    assert "- c: +30%" in text and "- b:" not in text
    rows[0] = _row("a", 0.26)
    text = "\n".join(render_plain(rows))
    assert "**3 of 5 within 25% (60%; goal 80%: not met)**" in text


def test_the_cli_takes_a_global_batch_and_refuses_it_beside_a_setup():
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    base = ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--gpus", "64", "--seq",
            "4096", "--tokens", "1e11", "--no-calibrate"]
    result = CliRunner().invoke(app, [*base, "--global-batch", "256", "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    s = d["setup"]
    dp = 64 // (s["tp"] * s["pp"] * s["cp"])
    assert s["micro_batch"] * s["grad_accum"] * dp == 256
    assert "for a target of 256: given" in d["warnings"][0]
    result = CliRunner().invoke(app, [*base, "--global-batch", "256", "--batch", "2"])
    assert result.exit_code == 2
    assert "--global-batch" in result.output and "Traceback" not in result.output


def test_lora_keeps_the_batch_of_its_micro_batch():
    """The default is read from pretraining recipes: a LoRA question gets none."""
    t = Training(model="llama-2-7b", method="lora", seq_len=4096)
    found = chosen_setup(t, Hardware(gpu="rtx-4090"))
    assert found is not None
    assert found[0].grad_accum == 1 and "global batch" not in found[1]


def test_rows_that_are_not_a_check_are_shown_and_not_counted():
    from gpuhours_dev.validation.at_scale import NOT_A_CHECK

    def row(label, error):
        return Comparison(PLAIN_KIND, label, 100.0, 100.0 * (1 + error), "GPU hours", "p",
                          "setup", "src", implied_mfu=0.05, group="dense")
    label = next(iter(NOT_A_CHECK))
    rows = [row("a", 0.1), row("b", -0.4), row(label, 0.1)]
    # the coincidental hit counts neither as a hit nor as a row
    assert plain_summary(rows) == {"all": (1, 2), "dense": (1, 2), "MoE": (0, 0),
                                   "verified": (1, 2)}
    assert summary(rows)[PLAIN_KIND] == (1, 2)
    text = "\n".join(render_plain(rows))
    assert "**1 of 2 within 25%" in text and f"| {label} (dense) |" in text
    assert "(not counted)" in text and NOT_A_CHECK[label] in text


def test_every_row_says_whether_its_figure_holds_downtime():
    """includes_downtime is yes (wall clock x GPUs) or no (a throughput rate), with the
    source's wording; a figure per trillion tokens is a rate by its own words (issue 16)."""
    for r in _csv_rows("pretraining_plain.csv"):
        assert r["includes_downtime"] in ("yes", "no"), r["model"]
        assert r["includes_downtime_basis"].startswith(
            ("wall clock", "taken as wall clock", "a throughput rate")), r["model"]
        if "trillion tokens" in r["model"] or "each trillion tokens" in r["published_as"]:
            assert r["includes_downtime"] == "no", r["model"]


def test_pythia_gpu_counts_are_the_configs_and_fill_the_batch():
    """Each Pythia row's GPU count is its config's "trained on N gpus" comment, and it fills the
    suite's 1,024 sequences: N / tp x micro-batch x accumulation (EleutherAI/pythia@a19eecb
    models/*/pythia-*.yml: tp 2 at 6.9B, 4 at 12B; micro-batches 32, 16, 8 x 2)."""
    suite = {"70M": (1, 32, 1), "160M": (1, 32, 1), "410M": (1, 32, 1), "1B": (1, 16, 1),
             "1.4B": (1, 16, 1), "2.8B": (1, 16, 1), "6.9B": (2, 8, 2), "12B": (4, 8, 2)}
    rows = [r for r in _csv_rows("pretraining_plain.csv") if r["model"].startswith("Pythia ")]
    assert len(rows) == 8
    for r in rows:
        n = int(r["gpu_count"])
        assert f"(trained on {n} gpus)" in r["gpu_count_basis"], r["model"]
        tp, micro, accum = suite[r["model"].split()[1]]
        assert n // tp * micro * accum == 1024, r["model"]


def test_unverified_published_hours_are_counted_apart():
    from gpuhours_dev.validation.at_scale import unverified_labels

    # the Pythia hours (no session could read the paper's appendix D) and the Llama 2 34B's
    # (read only in secondary transcriptions) are unverified; every other row was read
    assert unverified_labels() == {f"Pythia {s}" for s in (
        "70M", "160M", "410M", "1B", "1.4B", "2.8B", "6.9B", "12B")} | {"Llama 2 34B"}
    ok, bad = _row("Llama 2 7B", 0.1), _row("Pythia 1B", 0.1)
    far = _row("Pythia 12B", -0.5)
    assert plain_summary([ok, bad, far])["verified"] == (1, 1)
    assert plain_summary([ok, bad, far])["all"] == (2, 3)
    text = "\n".join(render_plain([ok, bad, far]))
    assert "Pythia 1B (dense)" in text and "(unverified)" in text


def test_opt_175b_is_the_metaseq_logbooks_rate():
    runs = {r.label: r for r in plain_runs()}
    opt = runs["OPT-175B"]
    # "~33 days of continuous training on 1024 80GB A100s" = 33 x 24 x 1,024 GPU hours, a
    # throughput figure ("assuming no hardware issues"), so no downtime is added
    assert opt.published_gpu_hours == 33 * 24 * 1024
    assert (opt.num_gpus, opt.gpu.name, opt.tokens, opt.includes_downtime) == (
        1024, "a100-80gb", 300e9, False)


def test_uniform_factor_counts_by_hand():
    """Errors -30%, -10%, +20% divided by k: at k = 0.8 they read -12.5%, +12.5%, +50%
    (two within 25%); at k = 1 -30% is out, -10% and +20% in (two); at 0.6 +16.7%, +50%,
    +100% (one)."""
    from gpuhours_dev.validation.at_scale import uniform_factor_counts
    counts = dict(uniform_factor_counts([-0.30, -0.10, 0.20], [0.6, 0.8, 1.0]))
    assert counts == {0.6: 1, 0.8: 2, 1.0: 2}
