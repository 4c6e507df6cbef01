"""Ctrl-C in a long bench sweep, for real: a SIGINT sent to a `gpuhours bench --sweep` process
whose output is piped. It logs each configuration on stderr, then prints the table of those that
finished and exits 130 (issue 18)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TINY = ["--set", "num_hidden_layers=1", "--set", "hidden_size=64", "--set",
        "intermediate_size=128", "--set", "num_attention_heads=4", "--set",
        "num_key_value_heads=2", "--set", "vocab_size=256"]
# many configurations, so that the sweep is still running when the signal comes, even when
# this test's process is scheduled late on a loaded machine (16 once finished first in CI)
CONFIGS = 48
SWEEP = ["bench", "-m", "qwen2-0.5b", *TINY, "--seq", "16", "--precision", "fp32",
         "--warmup", "1", "--min-steps", "2", "--max-steps", "3", "--no-ledger",
         "--peak-tflops", "1", "--device", "cpu", "--threads", "1",
         "--sweep", "batch=" + ",".join(str(b) for b in range(1, CONFIGS + 1))]


def test_sigint_prints_the_configurations_finished_and_exits_130(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "gpuhours.cli", *SWEEP],
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=tmp_path,
                                env={**os.environ, "COLUMNS": "80"},
                                # as from a shell: Ctrl-C's default disposition, even where this
                                # test process inherited SIGINT ignored (a child Python keeps an
                                # ignored SIGINT ignored, and the sweep then runs to its end)
                                preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                 signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 120
            while f"[1/{CONFIGS}] finished" not in err_path.read_text():
                assert proc.poll() is None, err_path.read_text()
                assert time.monotonic() < deadline, err_path.read_text()
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    log = err_path.read_text()
    assert proc.returncode == 130, log
    said = re.search(rf"interrupted: (\d+) of {CONFIGS} configuration\(s\) finished; their "
                     r"table follows\.", log)
    assert said is not None, log
    finished = int(said.group(1))
    assert 1 <= finished < CONFIGS
    assert "Traceback" not in log
    # the table holds exactly the configurations that finished, each whole at 80 columns
    rows = re.findall(r"^(\d+)  ", out, re.M)  # the "#" column
    assert [int(b) for b in rows] == list(range(1, finished + 1)), out
    assert all(len(line) <= 80 for line in out.splitlines()) and "…" not in out
