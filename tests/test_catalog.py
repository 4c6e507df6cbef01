"""Tests of the catalogs (gpus, prices, models) and their loader."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gpuhours import catalog
from gpuhours.catalog._load import parse_csv_rows, parse_yaml_rows
from gpuhours.catalog._names import NameIndex, normalise
from gpuhours.catalog.schema import GpuSpec, PriceRow
from gpuhours.errors import InputError, UnknownNameError

# --- names and aliases -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("A100-80GB", "a100-80gb"),
        ("a100_sxm4_80gb", "a100-80gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),  # as nvidia-smi prints it
        ("h100", "h100-sxm"),
        ("H100-80GB SXM", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("Tesla T4", "t4"),
        ("  L40S ", "l40s"),
    ],
)
def test_gpu_name_or_alias_resolves(name: str, canonical: str) -> None:
    assert catalog.gpu(name).name == canonical


# The gpu labels of shared/reference/cloud_prices.csv that the catalog keeps (GH200 and plain L40
# are not in the accelerator catalog, so their two price rows were left out).
REFERENCE_PRICE_LABELS = {
    "V100-16GB": "v100-16gb",
    "V100-32GB": "v100-32gb",
    "A100-40GB": "a100-40gb",
    "A100-80GB": "a100-80gb",
    "A100-80GB SXM": "a100-80gb",
    "A100-80GB PCIe": "a100-80gb-pcie",
    "H100-80GB SXM": "h100-sxm",
    "H100-80GB PCIe": "h100-pcie",
    "H100 NVL": "h100-nvl",
    "H200-141GB": "h200",
    "A10G": "a10g",
    "A10": "a10",
    "L4": "l4",
    "L40S": "l40s",
    "T4": "t4",
    "B200": "b200",
    "TPU v6e": "tpu-v6e",
    "RTX A6000": "rtx-a6000",
    "RTX 3090": "rtx-3090",
}


@pytest.mark.parametrize(("label", "canonical"), sorted(REFERENCE_PRICE_LABELS.items()))
def test_reference_price_labels_are_aliases(label: str, canonical: str) -> None:
    assert catalog.gpu(label).name == canonical


def test_normalise_folds_case_spaces_and_underscores_only() -> None:
    assert normalise(" H100_80GB  SXM ") == "h100-80gb-sxm"
    assert normalise("qwen2.5-7B") == "qwen2.5-7b"  # dots are part of names


def test_ambiguous_a100_is_not_matched_but_suggests_the_variants() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown GPU 'a100'") as info:
        catalog.gpu("a100")
    assert info.value.close == ["a100-40gb", "a100-80gb", "a100-40gb-pcie"]


def test_no_substring_match() -> None:
    with pytest.raises(UnknownNameError):
        catalog.gpu("h100-sxm-special-edition")
    with pytest.raises(UnknownNameError):
        catalog.gpu("100")


@pytest.mark.parametrize(
    ("name", "suggested"), [("a100-80", "a100-80gb"), ("h10", "h100-sxm"), ("l40", "l40s")]
)
def test_unknown_gpu_error_has_close_matches_and_the_fix(name: str, suggested: str) -> None:
    with pytest.raises(UnknownNameError, match=rf"Did you mean: .*{suggested}") as info:
        catalog.gpu(name)
    assert suggested in info.value.close
    assert len(info.value.close) <= 3
    assert "--peak-tflops" in str(info.value)
    assert isinstance(info.value, InputError)  # the CLI turns it into exit code 2


def test_unknown_model_error_says_how_to_pass_a_config() -> None:
    with pytest.raises(UnknownNameError, match=r"llama-2-7b.*path to a config\.json"):
        catalog.model("llama-2-8b")


def _index(rows: list[tuple[str, list[str]]]) -> NameIndex[str]:
    return NameIndex("GPU", "add a row", ((n, a, n) for n, a in rows), "inline.yaml")


def test_duplicate_alias_across_rows_is_a_load_error() -> None:
    with pytest.raises(InputError, match=r"inline\.yaml: .*'h100' belongs to both 'h100-sxm' and"):
        _index([("h100-sxm", ["h100"]), ("h100-pcie", ["H100"])])


def test_duplicate_name_differing_only_in_case_is_a_load_error() -> None:
    with pytest.raises(InputError, match=r"'a100-80gb' belongs to both"):
        _index([("a100-80gb", []), ("A100_80GB", [])])


def test_alias_equal_to_its_own_name_is_fine() -> None:
    index = _index([("a100-80gb", ["A100-80GB", "a100 80gb"])])
    assert index.lookup("A100 80GB") == "a100-80gb"


# --- accelerator rows --------------------------------------------------------------------------

REQUIRED_GPUS = [
    "v100-16gb", "v100-32gb", "t4", "a10g", "a10", "l4", "l40s", "rtx-3090", "rtx-4090",
    "rtx-a6000", "a100-40gb", "a100-80gb", "a100-40gb-pcie", "a100-80gb-pcie", "h100-sxm",
    "h100-pcie", "h100-nvl", "h200", "b200", "mi250x", "mi300x", "tpu-v5p",
]  # fmt: skip


def test_gpu_catalog_has_the_required_accelerators() -> None:
    names = [g.name for g in catalog.gpus()]
    assert len(names) >= 20
    assert set(REQUIRED_GPUS) <= set(names)
    for spec in catalog.gpus():
        assert spec.name == normalise(spec.name), spec.name
        assert spec.source and spec.as_of.year >= 2026, spec.name


@pytest.mark.parametrize(
    ("name", "precision", "tflops", "source_key"),
    [
        # NVIDIA quotes 1,979 BF16 "with sparsity" for H100 SXM; dense is half.
        ("h100-sxm", "bf16", 989.5, "NVPAGES"),
        ("h200", "bf16", 989.5, "NVPAGES"),
        ("h100-pcie", "bf16", 756.5, "datasheet"),
        # A100 datasheet: 312 dense, 624 with sparsity.
        ("a100-80gb", "bf16", 312.0, "LIGHT"),
        ("a100-80gb", "tf32", 156.0, "LIGHT"),
        # L4 datasheet: FP8 485 with sparsity.
        ("l4", "fp8", 242.5, "datasheet"),
        ("mi300x", "bf16", 1307.4, "MLENG"),
        ("rtx-a6000", "bf16", 154.8, "RTX A6000 datasheet"),
    ],
)
def test_peak_tflops_are_dense_not_sparse(
    name: str, precision: str, tflops: float, source_key: str
) -> None:
    spec = catalog.gpu(name)
    assert getattr(spec.dense_tflops, precision) == pytest.approx(tflops)
    assert source_key in spec.source


def test_parts_without_a_unit_have_null_not_zero() -> None:
    assert catalog.gpu("v100-16gb").dense_tflops.bf16 is None
    assert catalog.gpu("a100-80gb").dense_tflops.fp8 is None


def test_interconnect_kinds() -> None:
    assert catalog.gpu("h100-sxm").interconnect == "nvlink"
    assert catalog.gpu("h100-sxm").interconnect_gb_per_s_two_way == 900
    assert catalog.gpu("a100-80gb").interconnect_gb_per_s_two_way == 600
    assert catalog.gpu("h100-pcie").interconnect == "pcie"
    assert catalog.gpu("t4").interconnect_gb_per_s_two_way == 32  # PCIe Gen3 x16
    assert catalog.gpu("mi300x").interconnect == "xgmi"
    assert catalog.gpu("tpu-v5p").interconnect == "ici"


# --- prices ------------------------------------------------------------------------------------


def test_every_price_row_names_a_catalog_gpu() -> None:
    rows = catalog.prices()
    assert len(rows) >= 40
    for row in rows:
        assert catalog.gpu(row.gpu).name == row.gpu
        assert row.on_demand_usd_per_gpu_hour is not None
        assert row.source and row.as_of


def test_prices_cover_clouds_and_marketplaces() -> None:
    rows = catalog.prices()
    clouds = {r.provider for r in rows if r.provider_kind == "cloud"}
    marketplaces = {r.provider for r in rows if r.provider_kind == "marketplace"}
    assert len(clouds) >= 3
    assert len(marketplaces) >= 2


def test_prices_are_per_gpu_hour_and_filter_by_alias() -> None:
    rows = catalog.prices("H100-80GB SXM")
    assert {r.gpu for r in rows} == {"h100-sxm"}
    p5 = next(r for r in rows if r.instance == "p5.48xlarge")
    # skypilot catalog: 98.32 USD per instance-hour, 8 GPUs; the row is flagged as likely stale.
    assert p5.on_demand_usd_per_gpu_hour == pytest.approx(98.32 / 8)
    assert "stale" in p5.notes


def test_prices_of_an_unknown_gpu_raise() -> None:
    with pytest.raises(UnknownNameError, match="gh200"):
        catalog.prices("gh200")


# --- models ------------------------------------------------------------------------------------

REQUIRED_MODELS = [
    "gpt2", "qwen2-0.5b", "qwen2.5-0.5b", "qwen2.5-7b", "qwen3-8b", "llama-2-7b", "llama-2-13b",
    "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-8b", "llama-3.2-3b", "mistral-7b",
    "mixtral-8x7b", "mpt-125m", "mpt-350m", "mpt-760m", "mpt-1b", "mpt-3b", "mpt-7b", "mpt-13b",
    "mpt-30b", "bert-large-uncased",
]  # fmt: skip


def test_model_catalog_has_the_required_models() -> None:
    names = [m.name for m in catalog.models()]
    assert len(names) >= 12
    assert set(REQUIRED_MODELS) <= set(names)
    for entry in catalog.models():
        assert entry.published_params_source, entry.name


@pytest.mark.parametrize(
    ("name", "canonical", "hidden_size"),
    [
        ("llama-3.1-8b", "llama-3.1-8b", 4096),
        ("meta-llama/Llama-2-7b-hf", "llama-2-7b", 4096),  # the Hugging Face id
        ("Qwen2.5-VL-7B-LM", "qwen2.5-7b", 3584),
    ],
)
def test_model_by_name_returns_entry_and_config(
    name: str, canonical: str, hidden_size: int
) -> None:
    entry, config = catalog.model(name)
    assert entry is not None and entry.name == canonical
    assert config["hidden_size"] == hidden_size


def test_model_config_is_a_fresh_dict() -> None:
    _, config = catalog.model("gpt2")
    config["n_layer"] = 0
    assert catalog.model("gpt2")[1]["n_layer"] == 12


def test_model_from_a_file_or_a_directory(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": 64}')
    assert catalog.model(str(tmp_path / "config.json")) == (
        None,
        {"model_type": "llama", "hidden_size": 64},
    )
    assert catalog.model(str(tmp_path))[1]["hidden_size"] == 64
    assert catalog.model(tmp_path)[1]["hidden_size"] == 64


def test_malformed_config_json_names_file_line_column_and_expectation(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "hidden_size": 4096\n  "num_hidden_layers": 32\n}\n')
    with pytest.raises(
        InputError, match=r"config\.json, line 3, column 3: malformed JSON: Expecting ',' delimiter"
    ):
        catalog.model(str(path))


def test_config_json_must_be_an_object(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match=r"expected a JSON object .* found a list"):
        catalog.model(str(path))


def test_missing_config_file(tmp_path) -> None:
    with pytest.raises(InputError, match=r"nope\.json: no such file"):
        catalog.model(str(tmp_path / "nope.json"))
    with pytest.raises(InputError, match=r"config\.json: no such file"):
        catalog.model(str(tmp_path))  # a directory without a config.json


# llm-foundry's benchmark table (scripts/train/benchmarking/README.md @c6cfb428, July 2023, as
# copied in shared/reference/validation/throughput.csv) lists these parameter counts at sequence
# length 2048. Its configs had learned position embeddings (2048 x d_model) and biases
# ((11L + 1) x d_model) on top of the catalog's ALiBi, bias-free configs; adding both must
# reproduce the table exactly.
LLM_FOUNDRY_PARAMS_BILLION_AT_2048 = {
    "mpt-125m": 0.1253, "mpt-350m": 0.356, "mpt-760m": 0.7605, "mpt-1b": 1.316,
    "mpt-3b": 2.6518, "mpt-7b": 6.6589, "mpt-13b": 12.854, "mpt-30b": 29.9752,
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "table_billion"), sorted(LLM_FOUNDRY_PARAMS_BILLION_AT_2048.items())
)
def test_mpt_configs_are_the_llm_foundry_benchmark_models(name: str, table_billion: float) -> None:
    entry, config = catalog.model(name)
    assert entry is not None
    d, layers, vocab = config["d_model"], config["n_layers"], config["vocab_size"]
    config_params = 12 * layers * d * d + vocab * d + (2 * layers + 1) * d
    assert entry.published_params == config_params
    with_pos_and_biases = config_params + 2048 * d + (11 * layers + 1) * d
    assert round(with_pos_and_biases / 1e9, 4) == pytest.approx(table_billion)


#: remote-code model types (Qwen-1) have no transformers class: tests/test_qwen1.py counts them by hand
@pytest.mark.parametrize("name", [m.name for m in catalog.models()
                                  if catalog.model(m.name)[1].get("model_type") != "qwen"])
def test_config_builds_with_transformers_and_matches_published_params(name: str) -> None:
    """Exact identity: transformers' model built from the catalog config (meta device, no weights)
    has the published parameter count within 1% (tied weights counted once)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    entry, config = catalog.model(name)
    assert entry is not None
    hf_config = transformers.AutoConfig.for_model(**config)
    model_class = getattr(transformers, config["architectures"][0], None)
    with torch.device("meta"):
        if model_class is None:  # e.g. MPT's remote-code class name 'MPTForCausalLM'
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
        else:
            model = model_class(hf_config)
    counted = sum(p.numel() for p in model.parameters())  # shared (tied) tensors appear once
    if entry.published_params_scope == "language_model":  # the card sizes the LM alone
        counted -= sum(p.numel() for p in model.model.visual.parameters())
    assert counted == pytest.approx(entry.published_params, rel=0.01)


# --- loading -----------------------------------------------------------------------------------

GPU_ROW = """
- name: {name}
  full_name: Test GPU
  vendor: NVIDIA
  generation: hopper
  memory_gb: {memory_gb}
  memory_bw_gb_per_s: 1000
  dense_tflops: {{bf16: 100}}
  interconnect: none
  source: test
  as_of: 2026-11-22
"""


def test_yaml_validation_error_names_file_row_line_and_field() -> None:
    text = GPU_ROW.format(name="good", memory_gb=80) + GPU_ROW.format(name="bad", memory_gb=-1)
    with pytest.raises(
        InputError, match=r"gpus\.yaml, row 2 \('bad'\), line 13: memory_gb: .*greater than 0"
    ):
        parse_yaml_rows(text, "gpus.yaml", GpuSpec)


def test_yaml_unknown_field_is_rejected() -> None:
    text = GPU_ROW.format(name="x", memory_gb=80) + "  memory_gib: 80\n"
    with pytest.raises(InputError, match=r"memory_gib: Extra inputs are not permitted"):
        parse_yaml_rows(text, "gpus.yaml", GpuSpec)


@pytest.mark.parametrize("extra, error", [
    ("  decode_bw_gb_per_s: 800\n", r"decode_bw_gb_per_s needs a decode_bw_source"),
    ("  decode_bw_gb_per_s: 1200\n  decode_bw_source: rows 1-3\n",
     r"decode_bw_gb_per_s \(1200\) is above memory_bw_gb_per_s \(1000\)"),
    ("  decode_bw_source: rows 1-3\n", r"decode_bw_source is given without a decode_bw_gb_per_s"),
])
def test_decode_bandwidth_needs_a_source_and_stays_below_the_datasheet(extra: str,
                                                                       error: str) -> None:
    with pytest.raises(InputError, match=error):
        parse_yaml_rows(GPU_ROW.format(name="x", memory_gb=80) + extra, "gpus.yaml", GpuSpec)
    ok = "  decode_bw_gb_per_s: 800\n  decode_bw_source: rows 1-3\n"
    [row] = parse_yaml_rows(GPU_ROW.format(name="x", memory_gb=80) + ok, "gpus.yaml", GpuSpec)
    assert (row.decode_bw_gb_per_s, row.decode_bw_source) == (800, "rows 1-3")


def test_the_h20s_decode_bandwidth_and_a_users_bandwidth_in_its_place() -> None:
    from gpuhours.estimate.generation import estimate_generation
    from gpuhours.resolve import USER_BANDWIDTH_SOURCE, resolve_gpu, resolve_model
    from gpuhours.setup import Generation

    h20 = catalog.gpu("h20")
    assert (h20.decode_bw_gb_per_s, h20.memory_bw_gb_per_s) == (1900.0, 4000.0)
    assert "65, 73, 81, 91, 101, 111" in h20.decode_bw_source
    # a bandwidth the user gives replaces the catalog's decode figure, labelled an input
    mine = resolve_gpu("h20", bandwidth_gb_per_s=3100.0)
    assert (mine.memory_bw_gb_per_s, mine.decode_bw_gb_per_s, mine.decode_bw_source) == (
        3100.0, 3100.0, USER_BANDWIDTH_SOURCE)
    g = Generation(arch=resolve_model("qwen3-8b")[0], prompt_tokens=1, output_tokens=256,
                   batch=1, engine="sglang")
    fig = estimate_generation(g, mine).figures()["bandwidth_gb_per_s"]
    assert (fig.value, fig.basis) == (3100.0, "input")
    fig = estimate_generation(g, h20).figures()["bandwidth_gb_per_s"]
    assert (fig.value, fig.basis) == (1900.0, "assumed")
    # a GPU of the user's own figures: its bandwidth is an input too
    own = resolve_gpu(None, peak_tflops=300.0, memory_gb=80.0, bandwidth_gb_per_s=2000.0)
    fig = estimate_generation(g, own).figures()["bandwidth_gb_per_s"]
    assert (fig.value, fig.basis) == (2000.0, "input")


def test_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(InputError, match=r"gpus\.yaml, line 2, column 18: not valid YAML: mapping"):
        parse_yaml_rows("- name: x\n  full_name: Test: GPU\n", "gpus.yaml", GpuSpec)


def test_csv_errors_name_the_line() -> None:
    header = ",".join(PriceRow.model_fields)
    good = "aws,cloud,t4,g4dn.xlarge,1,us-east-1,0.526,,src,2026-11-22,"
    bad = "aws,cloud,t4,g4dn.xlarge,one,us-east-1,0.526,,src,2026-11-22,"
    rows = parse_csv_rows(f"{header}\n{good}\n", "prices.csv", PriceRow)
    assert rows[0].spot_usd_per_gpu_hour is None and rows[0].notes == ""
    with pytest.raises(InputError, match=r"prices\.csv, line 3: gpus_per_instance"):
        parse_csv_rows(f"{header}\n{good}\n{bad}\n", "prices.csv", PriceRow)
    with pytest.raises(InputError, match=r"prices\.csv, line 1: columns"):
        parse_csv_rows("provider,gpu\naws,t4\n", "prices.csv", PriceRow)


def test_catalog_is_lazy_and_never_imports_torch() -> None:
    code = textwrap.dedent(
        """
        import sys
        from gpuhours import catalog
        from gpuhours.catalog import _tables
        assert _tables.gpu_table.cache_info().currsize == 0, "read at import"
        catalog.gpus(); catalog.prices(); catalog.models(); catalog.model("llama-2-7b")
        assert "torch" not in sys.modules, "torch imported"
        assert "transformers" not in sys.modules, "transformers imported"
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_catalog_group_help_names_every_catalog_it_lists() -> None:
    # its one-line help said "gpus, models, prices" while `catalog nodes` exists too
    from typer.testing import CliRunner

    from gpuhours.cli import app, catalog_app

    names = [c.name or (c.callback.__name__ if c.callback else "")
             for c in catalog_app.registered_commands]
    assert "nodes" in names
    summary = " ".join(CliRunner().invoke(app, ["catalog", "--help"]).output.split()[:40])
    for name in names:
        assert f" {name}" in summary.split("Options:")[0], (name, summary)
