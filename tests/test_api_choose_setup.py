"""gpuhours.choose_setup: the setup `estimate` chooses for an open question, from the library
(issue 16's review: the chosen setup had no public entry point)."""

from __future__ import annotations

import pytest

import gpuhours
from gpuhours import catalog
from gpuhours.errors import FieldError
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training


def _open(model: str = "llama-2-70b") -> tuple[Training, Hardware]:
    arch, _ = resolve_model(model)
    return (Training(arch=arch, method="full", seq_len=4096),
            Hardware(gpu=catalog.gpu("a100-80gb"), num_gpus=64, gpus_per_node=8))


def test_the_chosen_setup_fits_where_the_defaults_do_not_and_makes_the_batch():
    t, hw = _open()
    assert not gpuhours.estimate_training(t, hw).memory.fits  # 70B, micro-batch 1, no sharding
    chosen = gpuhours.choose_setup(t, hw, global_batch=256)
    assert chosen is not None
    setup, why = chosen
    e = gpuhours.estimate_training(setup, hw)
    assert e.memory.fits and why.startswith("setup chosen by gpuhours")
    ranks = hw.num_gpus // (setup.tp * setup.pp * setup.cp)
    assert setup.micro_batch * setup.grad_accum * ranks == 256  # 256 is reachable exactly


def test_what_is_kept_stays_and_bad_arguments_are_named():
    t, hw = _open()
    chosen = gpuhours.choose_setup(t.model_copy(update={"checkpointing": True}), hw,
                                   global_batch=256, keep=("checkpointing",))
    assert chosen is not None and chosen[0].checkpointing
    with pytest.raises(FieldError, match="keep"):
        gpuhours.choose_setup(t, hw, keep=("micro-batch",))
    with pytest.raises(FieldError, match="fixed_overlaps"):
        gpuhours.choose_setup(t, hw, fixed_overlaps=("bogus",))
    with pytest.raises(FieldError, match="fixed_overlaps"):
        gpuhours.fit_training(t, hw, fixed_overlaps=("bogus",))


def test_hardware_takes_a_catalog_node_type_as_the_cli_does():
    h = Hardware(gpu="h100-sxm", node="dgx-h100", num_gpus=16)
    assert (h.gpus_per_node, h.inter_node_gb_per_s_one_way) == (8, 50.0)  # 8 x 400 Gb/s
    with pytest.raises(FieldError, match="carries"):
        Hardware(gpu="a100-80gb", node="dgx-h100")
    with pytest.raises(FieldError, match="give one or the other"):
        Hardware(gpu="h100-sxm", node="dgx-h100", gpus_per_node=4)
