"""Every setup choice of Training has its CLI option in estimate and fit, named as the one
field -> flag table (cli_common.OPTION_OF_FIELD) names it in errors, and its value reaches the
estimate."""

from __future__ import annotations

import json

import typer.main
from typer.testing import CliRunner

from gpuhours.cli import _PARAM_OF_FIELD, app
from gpuhours.cli_common import option_of
from gpuhours.setup import CHOICE_FIELDS

runner = CliRunner()
# the vision options are estimate's only (fit searches the batch of a text setup)
ESTIMATE_ONLY = {"grad_accum", "images_per_example", "image_pixels", "image_tokens",
                 "image_max_pixels", "train_vision"}


def _options(command: str) -> dict[str, list[str]]:
    group = typer.main.get_group(app)
    cmd = group.commands[command]
    return {p.name: [*p.opts, *p.secondary_opts] for p in cmd.params if p.name}


def test_every_choice_has_its_option_named_as_errors_name_it() -> None:
    for command in ("estimate", "fit"):
        options = _options(command)
        for field in CHOICE_FIELDS:
            if command == "fit" and field in ESTIMATE_ONLY:
                continue
            param = _PARAM_OF_FIELD.get(field, field)
            assert param in options, (command, field)
            assert option_of(field) in options[param], (command, field, options[param])


def _memory(*args: str) -> float:
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                 "--method", "qlora", "--seq", "2048", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["memory"]["total_bytes"]["value"]


def test_the_memory_choices_reach_the_estimate() -> None:
    plain = _memory()
    # a 1-byte dropout mask per adapter input, and fp32 logits held through backward, add;
    # no fp32 upcast of the non-4-bit weights takes away
    assert _memory("--lora-dropout", "0.05") > plain
    assert _memory("--held-logits", "fp32") > plain
    assert _memory("--no-kbit-upcast") < plain
    # the branch held fixed: DeepSpeed's engine (a reduce bucket) would otherwise default it to
    # peft-half, whose adapters keep no fp32 copy of their inputs (lora_traffic.lora_branch_of)
    zero2 = ("--zero", "2", "--gpus", "2", "--lora-branch", "peft-half")
    buckets = _memory(*zero2, "--deepspeed-reduce-bucket", "200000000")
    assert buckets > _memory(*zero2)
    # DeepSpeed's default below ZeRO-3 is one bucket buffer; overlap_comm adds the second
    assert _memory(*zero2, "--deepspeed-reduce-bucket", "200000000",
                   "--deepspeed-overlap-comm") > buckets
    assert _memory(*zero2, "--deepspeed-reduce-bucket", "200000000",
                   "--no-deepspeed-overlap-comm") == buckets


def test_adapter_choices_without_adapters_are_refused_naming_the_flags() -> None:
    # a LoRA dropout or a k-bit preparation on a setup that has no adapters / no 4-bit base
    # changed nothing before; now the user hears which option conflicts with which
    cases = [(["--method", "full", "--lora-dropout", "0.05"], "--lora-dropout/--method"),
             (["--method", "lora", "--no-kbit-upcast"], "--kbit-upcast/--method"),
             (["--method", "full", "--kbit-upcast"], "--kbit-upcast/--method")]
    for command in ("estimate", "fit"):
        for args, flags in cases:
            result = runner.invoke(app, [command, "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                         *args])
            assert result.exit_code == 2, (command, args, result.output)
            assert flags in result.output, (command, args, result.output)
            assert "Traceback" not in result.output
    ok = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                             "--method", "qlora", "--no-kbit-upcast", "--lora-dropout", "0.05"])
    assert ok.exit_code == 0, ok.output


def _step_s(*args: str) -> float:
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                 "--method", "lora", "--seq", "4096", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["step_time_s"]["value"]


def test_the_lora_branch_reaches_the_step_time() -> None:
    # peft's eager branch with fp32 adapters (the default) moves the most bytes, the same
    # operators in half precision fewer, a fused branch none of its own
    default = _step_s()
    assert default == _step_s("--lora-branch", "peft-fp32")
    assert default > _step_s("--lora-branch", "peft-half") > _step_s("--lora-branch", "fused")
    for command in ("estimate", "fit"):
        refused = runner.invoke(app, [command, "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                      "--method", "full", "--lora-branch", "fused"])
        assert refused.exit_code == 2, refused.output
        assert "--lora-branch/--method" in refused.output
        assert "Traceback" not in refused.output
