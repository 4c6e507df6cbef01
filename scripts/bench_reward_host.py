"""Time a rule reward's host work per response: the seconds one CPU core spends scoring one
math response, by response length (issue 13; plan/rl_reward_host.py models it in a step).

What is measured (the real package functions, nothing reimplemented):

- `math-verify`: huggingface Math-Verify's `math_metric`, configured exactly as NeMo-RL's
  HFVerifyWorker (nemo_rl/environments/math_environment.py @108bffda, the same at v0.6.0):
  gold extraction (LatexExtractionConfig(),), prediction extraction (ExprExtractionConfig(),
  LatexExtractionConfig()), called as verify_func(["\\boxed{" + gold + "}"], [response]) with
  stdout/stderr redirected and the math_verify logger at CRITICAL, as the worker does.
  NeMo-RL's uv.lock pins math-verify 0.8.0, latex2sympy2-extended 1.10.2, sympy 1.14.0
  (uv.lock @108bffda and @v0.6.0): install those.
- `string-match`: verl's `math_dapo.compute_score` (verl/utils/reward_score/math_dapo.py, the
  PyPI wheel verl 0.9.1), loaded from the installed file on its own (the package's
  __init__ imports torch and ray, which its scorer does not need). NeMo-RL's
  dapo_math_verifier.py is adapted from it (math_verify_impl dapo_math_verify). It scores
  only the response's last 300 characters.

Responses are synthetic: seeded random math-like chain-of-thought (sentences with inline
$...$ equations: sums, products, fractions, powers), cut to `tokens x 4` characters (about 4
characters a token, an assumption for English math text), ending in "the answer is
$\\boxed{ANSWER}$." Gold answers are integers and fractions as in OpenMathInstruct-2; half the
responses box the gold answer (correct), half a different one (wrong); a third set ("cut") is
the same text without its answer, as a response stopped at the length cap (not in the model's
figures: the rows do not state how many responses hit the cap).

The figures are measured on this project's 2-core VM (its CPU in the output): for the rows'
hosts they are an assumption (plan/rl_reward_host.py says so where it uses them).

Install (not in the project's environment; CI does not):
  python -m pip install --target /tmp/mv "math-verify[antlr4_13_2]==0.8.0" \\
      "latex2sympy2_extended==1.10.2" "sympy==1.14.0"
  python -m pip install --no-deps --target /tmp/verlpkg verl==0.9.1
  PYTHONPATH=/tmp/mv python scripts/bench_reward_host.py --verl /tmp/verlpkg
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import logging
import platform
import random
import statistics
import sys
import time
from pathlib import Path

LENGTHS = (500, 1_000, 2_000, 4_000, 8_000)  # response tokens
CHARS_PER_TOKEN = 4


def _golds(rng: random.Random, n: int) -> list[str]:
    out = []
    for i in range(n):
        if i % 3 == 2:
            out.append(f"\\frac{{{rng.randint(1, 20)}}}{{{rng.randint(21, 40)}}}")
        else:
            out.append(str(rng.randint(2, 999)))
    return out


def _sentence(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
    x = rng.choice("xyznk")
    forms = [
        f"Substituting, we get ${a}{x} + {b} = {a * 3 + b}$, so ${x} = 3$. ",
        f"Next, $\\frac{{{a}}}{{{b}}} \\cdot {c} = \\frac{{{a * c}}}{{{b}}}$. ",
        f"We compute ${a}^{c} \\bmod {b}$ step by step. ",
        f"Then the sum is ${a} + {b} + {c} = {a + b + c}$. ",
        f"Squaring both sides gives $({x} - {a})^2 = {b}$, hence ${x} = {a} \\pm \\sqrt{{{b}}}$. ",
        f"Let me check the case ${x} = {c}$: the product ${a} \\times {c} = {a * c}$. ",
        "This means the constraint is satisfied, and we can move on to the next part. ",
    ]
    return rng.choice(forms)


def response(rng: random.Random, tokens: int, answer: str) -> str:
    """A math-like response of about `tokens` x 4 characters, ending in a boxed answer."""
    tail = f"Therefore, the answer is $\\boxed{{{answer}}}$."
    body = []
    size = 0
    target = tokens * CHARS_PER_TOKEN - len(tail)
    while size < target:
        s = _sentence(rng)
        body.append(s)
        size += len(s)
    return "".join(body)[:max(0, target)] + "\n\n" + tail


def _wrong(gold: str) -> str:
    return gold + "1" if not gold.startswith("\\frac") else gold.replace("}{", "1}{", 1)


def _time(fn, cases) -> list[float]:
    out = []
    for resp, gold in cases:
        t0 = time.perf_counter()
        fn(resp, gold)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=24, help="responses a length and case")
    p.add_argument("--verl", type=Path, default=None,
                   help="folder holding the verl wheel's files (verl/utils/reward_score/...)")
    args = p.parse_args()
    try:
        from math_verify.metric import math_metric
        from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
    except ImportError:
        print("math_verify is not importable: skipped. Install it apart from the project, e.g.\n"
              "  python -m pip install --target /tmp/mv \"math-verify[antlr4_13_2]==0.8.0\" "
              "latex2sympy2_extended==1.10.2 sympy==1.14.0\n"
              "then run with PYTHONPATH=/tmp/mv (NeMo-RL's uv.lock pins these versions).")
        return 0
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    verify_func = math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                              pred_extraction_target=(ExprExtractionConfig(),
                                                      LatexExtractionConfig()))

    def hf_math_verify(resp: str, gold: str) -> float:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            score, _ = verify_func(["\\boxed{" + gold + "}"], [resp])
        return float(score)

    scorers = {"math-verify (NeMo-RL HFVerifyWorker's math_metric)": hf_math_verify}
    if args.verl is not None:
        path = args.verl / "verl" / "utils" / "reward_score" / "math_dapo.py"
        spec = importlib.util.spec_from_file_location("verl_math_dapo", path)
        if spec is None or spec.loader is None or not path.exists():
            print(f"no verl math_dapo.py at {path}: verl's scorer skipped")
        else:
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            scorers["string-match (verl math_dapo.compute_score)"] = (
                lambda r, g: mod.compute_score(r, g)["score"])

    from importlib.metadata import PackageNotFoundError, version

    def _version(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    from gpuhours.track.loop import _cpu_name  # the CPU's model name, as the ledger records it

    print(f"host: {platform.machine()}, {_cpu_name()}; Python {sys.version.split()[0]}; "
          f"math-verify {_version('math-verify')}, latex2sympy2_extended "
          f"{_version('latex2sympy2_extended')}, sympy {_version('sympy')}; one process")
    print("measured on this VM: an assumption for any other host\n")
    rng = random.Random(13)
    print("| scorer | response tokens | case | median s/sample | mean s/sample | max |")
    print("|---|---|---|---|---|---|")
    for name, fn in scorers.items():
        fn("warm up $\\boxed{1}$", "1")
        for tokens in LENGTHS:
            golds = _golds(rng, args.samples)
            for case in ("correct", "wrong", "cut"):
                if case == "cut":  # cut at the length cap before its answer: no \\boxed{}
                    cases = [(response(rng, tokens, g).rsplit("\n\n", 1)[0], g) for g in golds]
                else:
                    cases = [(response(rng, tokens, g if case == "correct" else _wrong(g)), g)
                             for g in golds]
                ts = _time(fn, cases)
                print(f"| {name} | {tokens:,} | {case} | {statistics.median(ts):.4g} | "
                      f"{statistics.fmean(ts):.4g} | {max(ts):.4g} |", flush=True)
    return 0




if __name__ == "__main__":
    raise SystemExit(main())
