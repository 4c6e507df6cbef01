"""Sample lengths of a dataset: a log-normal with the dataset's mean and spread, capped at the
setup's longest sequence (estimate/fragmentation.py replays micro-batches of these lengths).
Pure Python: the setup's checks read it too."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import NormalDist

#: the seed of the draw of lengths (the same lengths every time)
SEED = 0


@dataclass(frozen=True)
class LengthDistribution:
    """Tokens per sample of a dataset: mean and standard deviation before the cap, the cap
    (`max_len`, the setup's seq_len) and what happens to a longer sample: "drop" (ms-swift's
    truncation_strategy 'delete') or "truncate" (cut to the cap). Shape: log-normal with that
    mean and spread (lengths are positive and right-skewed); spread 0: every sample the same."""

    mean: float
    std: float
    max_len: int
    long_samples: str = "drop"

    def _lognormal(self) -> tuple[float, float]:
        """(mu, sigma) of the log-normal with this mean and standard deviation."""
        sigma2 = math.log1p((self.std / self.mean) ** 2)
        return math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2)

    def kept_fraction(self) -> float:
        """The share of samples at most max_len tokens long (all when truncated)."""
        if self.long_samples == "truncate":
            return 1.0
        if self.std <= 0:
            return 1.0 if self.mean <= self.max_len else 0.0
        mu, sigma = self._lognormal()
        return NormalDist().cdf((math.log(self.max_len) - mu) / sigma)

    def sample(self, n: int, seed: int = SEED) -> list[int]:
        """`n` lengths, each in 1..max_len, drawn by inverting the (capped) distribution's CDF
        at uniform draws of random.Random(seed): the same lengths every time."""
        if self.std <= 0:
            return [max(1, min(round(self.mean), self.max_len))] * n
        mu, sigma = self._lognormal()
        z = NormalDist()
        top = self.kept_fraction()
        rng = random.Random(seed)
        out = []
        for _ in range(n):
            u = min(max(rng.random() * top, 1e-12), 1 - 1e-12)
            x = math.exp(mu + sigma * z.inv_cdf(u))
            out.append(max(1, min(round(x), self.max_len)))
        return out


def check_generation_context(model: str, max_positions: int | None, prompt_tokens: int,
                             output_tokens: int, fields: str | tuple[str, ...]) -> None:
    """Refuse a generated sequence (prompt + output tokens) longer than the context the model's
    config states (max_position_embeddings; None: not stated, nothing refused). Engines refuse
    it too: vLLM's ModelConfig will not take a max_model_len above the config's without
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (vllm/config.py, _get_and_verify_max_len), SGLang's
    --context-length without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1; transformers'
    generate goes on past it only into positions a RoPE model was not trained for. The RL
    phases of a plan apply the same rule (plan/phases.py rl())."""
    from gpuhours.errors import FieldError

    total = prompt_tokens + output_tokens
    if max_positions and total > max_positions:
        raise FieldError(fields, f"a {prompt_tokens:,}-token prompt and a {output_tokens:,}-token "
                                 f"output ({total:,} tokens) exceed {model}'s {max_positions:,}-"
                                 f"token context (max_position_embeddings).",
                         "Shorten them, or give a config.json whose max_position_embeddings "
                         "states the extended context (rope_scaling) the run uses.")
