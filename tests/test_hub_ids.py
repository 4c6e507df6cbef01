"""Models by the names people use (issue 15): a Hugging Face id through the local cache, a model
directory, tuned releases (-Instruct, -Chat, -it) mapped to their catalog base, and close names
for an unknown id. The cache is a fake one in tmp_path, laid out as huggingface_hub lays it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuhours import catalog
from gpuhours.catalog._names import base_names
from gpuhours.errors import UnknownNameError
from gpuhours.estimate.params import count_params
from gpuhours.resolve import cached_hub_config, hf_hub_cache_dir, resolve_model


def _snapshot(hub: Path, hub_id: str, revision: str, config: dict[str, Any],
              main: bool = True) -> Path:
    repo = hub / ("models--" + hub_id.replace("/", "--"))
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if main:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision, encoding="utf-8")
    return snap / "config.json"


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf" / "hub"


def _small_llama(**kw: Any) -> dict[str, Any]:
    return {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000, **kw}


def test_cache_dir_follows_huggingface_hubs_variables(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert hf_hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "direct"))
    assert hf_hub_cache_dir() == tmp_path / "direct"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"


def test_a_cached_hub_id_is_read_from_its_config(hf_home: Path) -> None:
    """A model not in the catalog, cached locally: its own config is read (2 layers of 256:
    2 x (4 x 256^2 + 3 x 256 x 512 + 2 x 256) + 2 x 1000 x 256 + 256 = 1,824,000)."""
    path = _snapshot(hf_home, "someone/tiny-llama", "r1", _small_llama())
    arch, basis = resolve_model("someone/tiny-llama")
    assert count_params(arch).total == 2 * (4 * 256**2 + 3 * 256 * 512 + 2 * 256) + (
        2 * 1000 * 256 + 256) == 1_824_000
    assert str(path) in basis and "local Hugging Face cache" in basis


def test_refs_main_wins_else_the_newest_snapshot(hf_home: Path) -> None:
    old = _snapshot(hf_home, "o/m", "aaa", _small_llama(num_hidden_layers=1), main=False)
    new = _snapshot(hf_home, "o/m", "bbb", _small_llama(num_hidden_layers=3), main=False)
    os.utime(old, (1_000_000, 1_000_000))
    assert cached_hub_config("o/m") == new
    (hf_home / "models--o--m" / "refs").mkdir()
    (hf_home / "models--o--m" / "refs" / "main").write_text("aaa\n", encoding="utf-8")
    assert cached_hub_config("o/m") == old
    assert resolve_model("o/m")[0].num_layers == 1


def test_hf_hub_cache_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    _snapshot(tmp_path / "c", "o/x", "r", _small_llama(hidden_size=128))
    assert resolve_model("o/x")[0].hidden_size == 128


def test_a_cached_instruct_model_uses_its_own_config(hf_home: Path) -> None:
    """Qwen/Qwen2.5-7B-Instruct's own config (here the catalog's, one layer fewer to tell them
    apart) is preferred over mapping the id to the catalog's base."""
    _, cfg = catalog.model("qwen2.5-7b")
    _snapshot(hf_home, "Qwen/Qwen2.5-7B-Instruct", "r", {**cfg, "num_hidden_layers": 27})
    arch, basis = resolve_model("Qwen/Qwen2.5-7B-Instruct")
    assert arch.num_layers == 27 and "cache" in basis


@pytest.mark.parametrize(("typed", "base"), [
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
    ("google/gemma-2-9b-it", "gemma-2-9b"),
    ("qwen3-8b-instruct", "qwen3-8b"),
    ("Qwen/Qwen3-14B-Base", "qwen3-14b"),
])
def test_tuned_releases_map_to_their_catalog_base(hf_home: Path, typed: str, base: str) -> None:
    arch, basis = resolve_model(typed)
    assert count_params(arch).total == count_params(resolve_model(base)[0]).total
    assert f"catalog's {base}" in basis


def test_base_names_take_off_tuned_endings() -> None:
    assert base_names("Llama-2-7b-chat-hf") == ["llama-2-7b-chat", "llama-2-7b"]
    assert base_names("Qwen2.5-7B") == []


def test_a_model_directory(tmp_path: Path) -> None:
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(_small_llama()))
    arch, basis = resolve_model(str(tmp_path / "my-model"))
    assert arch.hidden_size == 256 and basis.startswith("config.json")


def test_an_unknown_id_gets_close_names(hf_home: Path) -> None:
    with pytest.raises(UnknownNameError) as e:
        resolve_model("Qwen/Qwen2.5-8B-Instruct")
    assert e.value.close and e.value.close[0].startswith("qwen2.5")
    assert "huggingface-cli download" in str(e.value) and str(hf_home) in str(e.value)


def test_cli_unknown_id_exits_2_with_suggestions(hf_home: Path) -> None:
    from typer.testing import CliRunner

    import gpuhours.cli

    result = CliRunner().invoke(gpuhours.cli.app, ["estimate", "--model",
                                                   "meta-llama/Lama-3.1-8B", "--gpu", "h100-sxm"])
    assert result.exit_code == 2
    assert "llama-3.1-8b" in result.output and "Traceback" not in result.output
