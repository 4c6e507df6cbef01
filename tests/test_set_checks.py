"""`--set` (bench and trace) rejects, before any model is built, a config key that the model's
config does not have and transformers would not read, and a shape that cannot run: exit 2, a
message that names the key (issue 18)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.resolve import OPTIONAL_CONFIG_KEYS, check_overrides, model_config
from gpuhours.setup import Training


def _trace(*sets: str) -> tuple[int, str]:
    args = ["trace", "-m", "qwen2-0.5b"]
    for s in sets:
        args += ["--set", s]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})
    return r.exit_code, r.output


@pytest.mark.parametrize("sets, message", [
    (["num_hidden_layer=2"], r"unknown config key 'num_hidden_layer' for qwen2-0.5b "
                             r"\(model_type qwen2\)\. Did you mean: num_hidden_layers"),
    (["colour=red"], r"unknown config key 'colour'"),
    (["hidden_size=100"], r"hidden_size=100: hidden_size \(100\) is not a multiple of "
                          r"num_attention_heads \(14\)"),
    (["num_attention_heads=5"], r"num_attention_heads=5: hidden_size \(896\) is not a multiple "
                                r"of num_attention_heads \(5\)"),
    (["num_key_value_heads=3"], r"num_attention_heads \(14\) is not a multiple of "
                                r"num_key_value_heads \(3\)"),
    (["hidden_size=0"], r"hidden_size=0: expected a whole number >= 1"),
    (["num_hidden_layers=-1"], r"num_hidden_layers=-1: expected a whole number >= 1"),
    (["num_hidden_layers=1.5"], r"num_hidden_layers=1.5: expected a whole number >= 1"),
    (["num_hidden_layers=true"], r"num_hidden_layers=True: expected a whole number >= 1"),
    (["hidden_size=64"], r"hidden_size \(64\) is not a multiple of num_attention_heads \(14\)"),
])
def test_trace_rejects_bad_sets(sets: list[str], message: str,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    # nothing may be built: the trace's model builder fails the test if it is reached
    import gpuhours.trace as trace_pkg

    def built(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(trace_pkg, "trace_training", built, raising=False)
    code, output = _trace(*sets)
    assert code == 2, output
    assert output.startswith("error --set: ")
    import re

    assert re.search(message, " ".join(output.split())), output
    assert "Traceback" not in output


def test_bench_rejects_an_unknown_key_before_loading_torch() -> None:
    r = CliRunner().invoke(app, ["bench", "-m", "qwen2-0.5b", "--set", "hiden_size=64",
                                 "--no-ledger"])
    assert r.exit_code == 2, r.output
    assert "--set" in r.output and "'hiden_size'" in r.output and "hidden_size" in r.output


def test_a_shape_that_divides_is_accepted() -> None:
    t = Training(model="qwen2-0.5b", config_overrides={
        "num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256})
    assert (t.arch.hidden_size, t.arch.num_heads, t.arch.num_kv_heads) == (64, 4, 2)


def test_head_dim_given_lifts_the_divisibility_of_the_hidden_size() -> None:
    cfg, _, _ = model_config("qwen2-0.5b", {"hidden_size": 100, "head_dim": 64})
    assert cfg["hidden_size"] == 100 and cfg["head_dim"] == 64


def test_an_optional_key_the_config_leaves_out_is_accepted() -> None:
    assert "head_dim" in OPTIONAL_CONFIG_KEYS
    cfg, _, basis = model_config("llama-2-7b", {"sliding_window": 4096})
    assert cfg["sliding_window"] == 4096 and "sliding_window=4096" in basis


def test_gpt2_names_are_checked_under_their_own_spelling() -> None:
    with pytest.raises(FieldError, match=r"n_embd \(770\) is not a multiple of n_head \(12\)"):
        model_config("gpt2", {"n_embd": 770})
    cfg, _, _ = model_config("gpt2", {"n_embd": 384, "n_head": 6})
    assert cfg["n_embd"] == 384


def test_the_error_is_keyed_by_the_field_the_cli_calls_set() -> None:
    with pytest.raises(FieldError) as info:
        check_overrides({"model_type": "llama", "hidden_size": 64}, {"hiden_size": 64}, "m")
    assert info.value.fields == ("config_overrides",)
    assert "Did you mean: hidden_size" in info.value.message
