"""A deliberately slow training run, tracked by gpuhours: a tiny Llama-shaped causal LM (random
weights, built from a config: no download) trained on the CPU on text this script generates,
with the seeds' mistakes:

- examples are read one by one from a slow disk (SLOW_READ_S per example, simulated with a
  sleep: the seed's "persistent storage") and tokenised inside Dataset.__getitem__;
- DataLoader(num_workers=0): loading never overlaps the step;
- every example padded to the maximum length (SEQ_LEN);
- a full checkpoint (model + optimizer state) every SAVE_EVERY steps, to the same slow storage
  (SLOW_WRITE_BYTES_PER_S, simulated with a sleep).

Each fix is a flag, so that `measure.py` can apply one at a time and measure its saving:
    python examples/slow_training/train.py --ledger /tmp/l.sqlite                 # as written
    python examples/slow_training/train.py --ledger /tmp/l.sqlite --workers 1     # overlap loading
    python examples/slow_training/train.py --ledger /tmp/l.sqlite --pack          # no padding
    python examples/slow_training/train.py --ledger /tmp/l.sqlite --save-every 20 # fewer saves
It prints the tracked run's id; then `gpuhours doctor ID --ledger /tmp/l.sqlite`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from gpuhours.track import track_run

SEQ_LEN = 256
MICRO_BATCH = 8
VOCAB = 4096
SAVE_EVERY = 2
#: simulated latency of reading one example from slow storage, seconds (assumption of the example)
SLOW_READ_S = 0.04
#: simulated bandwidth of writing a checkpoint to the same slow storage, bytes/s (assumption)
SLOW_WRITE_BYTES_PER_S = 100e6
PAD, EOS, UNK = 0, 1, 2


def words(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    syll = ["ka", "to", "ri", "mu", "se", "lo", "na", "pi", "de", "gu", "fe", "zo", "ba", "ly"]
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choice(syll) for _ in range(rng.randint(1, 4))))
    return sorted(out)


def make_corpus(path: Path, docs: int, seed: int = 0) -> None:
    """Documents of 20 to 180 words, one JSON line each."""
    rng = random.Random(seed)
    vocab = words(VOCAB - 3)
    with path.open("w") as f:
        for _ in range(docs):
            n = rng.randint(20, 180)
            f.write(json.dumps({"text": " ".join(rng.choice(vocab) for _ in range(n)) + "."}) + "\n")


class Tokenizer:
    """Word-level: lower-case, split on non-letters, look up (deliberately plain Python)."""

    def __init__(self) -> None:
        self.ids = {w: i + 3 for i, w in enumerate(words(VOCAB - 3))}

    def __call__(self, text: str) -> list[int]:
        return [self.ids.get(w, UNK) for w in re.findall(r"[a-z]+", text.lower())] + [EOS]


def read_line(path: Path, offsets: list[int], i: int) -> str:
    time.sleep(SLOW_READ_S)  # the slow disk
    with path.open() as f:
        f.seek(offsets[i])
        return str(json.loads(f.readline())["text"])


class PaddedDocs(Dataset):
    """The mistake: read + tokenise inside __getitem__, pad every example to SEQ_LEN."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = _offsets(path)
        self.tok = Tokenizer()

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.tok(read_line(self.path, self.offsets, i))[:SEQ_LEN]
        n = len(ids)
        input_ids = torch.full((SEQ_LEN,), PAD, dtype=torch.long)
        input_ids[:n] = torch.tensor(ids)
        mask = torch.zeros(SEQ_LEN, dtype=torch.long)
        mask[:n] = 1
        labels = input_ids.masked_fill(mask == 0, -100)
        return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


class PackedDocs(IterableDataset):
    """The packing fix: the same documents (read and tokenised the same slow way), concatenated
    and cut into full SEQ_LEN blocks: no padding."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = _offsets(path)
        self.tok = Tokenizer()

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = get_worker_info()
        mine = range(len(self.offsets)) if info is None else range(info.id, len(self.offsets),
                                                                   info.num_workers)
        buf: list[int] = []
        for i in mine:
            buf += self.tok(read_line(self.path, self.offsets, i))
            while len(buf) >= SEQ_LEN:
                block, buf = buf[:SEQ_LEN], buf[SEQ_LEN:]
                ids = torch.tensor(block)
                yield {"input_ids": ids, "attention_mask": torch.ones(SEQ_LEN, dtype=torch.long),
                       "labels": ids.clone()}
        if buf:  # the last partial block, padded
            n = len(buf)
            ids = torch.full((SEQ_LEN,), PAD, dtype=torch.long)
            ids[:n] = torch.tensor(buf)
            mask = torch.zeros(SEQ_LEN, dtype=torch.long)
            mask[:n] = 1
            yield {"input_ids": ids, "attention_mask": mask,
                   "labels": ids.masked_fill(mask == 0, -100)}


def _bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir())


def _fsync(folder: Path) -> None:
    for f in folder.iterdir():
        with f.open("rb+") as h:
            os.fsync(h.fileno())


def _offsets(path: Path) -> list[int]:
    out, pos = [], 0
    with path.open("rb") as f:
        for line in f:
            out.append(pos)
            pos += len(line)
    return out


def model_config() -> dict[str, object]:
    return dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=SEQ_LEN,
                pad_token_id=PAD, eos_token_id=EOS, bos_token_id=EOS)


def train(ledger: str, docs: int, workers: int, pack: bool, save_every: int,
          phase: str = "slow-training", seed: int = 0) -> int:
    """One epoch over the corpus; returns the tracked run id."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)  # stable timings on a small CPU (TORCH_NOTES: 1.2% CV vs 46%)
    work = Path(tempfile.mkdtemp(prefix="slow_training_"))
    corpus = work / "corpus.jsonl"
    make_corpus(corpus, docs, seed)
    torch.manual_seed(seed)
    cfg = LlamaConfig(**model_config())
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dataset = PackedDocs(corpus) if pack else PaddedDocs(corpus)
    loader = DataLoader(dataset, batch_size=MICRO_BATCH, shuffle=False, num_workers=workers,
                        persistent_workers=workers > 0, prefetch_factor=2 if workers else None)
    planned = -(-docs // MICRO_BATCH)  # the run as written: one step per MICRO_BATCH documents
    config = {"micro_batch": MICRO_BATCH, "seq_len": SEQ_LEN, "grad_accum": 1,
              "num_workers": workers, "save_steps": save_every, "precision": "fp32",
              "model_config": cfg.to_dict(), "cpu_cores": os.cpu_count(), "packing": pack}
    ckpt = work / "checkpoint"
    with track_run(project="slow-training-example", phase=phase, planned_steps=planned,
                   config=config, ledger=ledger) as run:
        for batch in run.batches(loader):
            with run.compute():
                loss = model(**batch).loss
                loss.backward()
            with run.optimizer():
                opt.step()
                opt.zero_grad(set_to_none=True)
            if run.step % save_every == 0:
                with run.save(path=ckpt):
                    model.save_pretrained(ckpt)
                    torch.save(opt.state_dict(), ckpt / "optimizer.pt")
                    _fsync(ckpt)
                    time.sleep(_bytes(ckpt) / SLOW_WRITE_BYTES_PER_S)  # the slow storage
        run_id = run.run_id
    return run_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ledger", required=True)
    ap.add_argument("--docs", type=int, default=240)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--pack", action="store_true")
    ap.add_argument("--save-every", type=int, default=SAVE_EVERY)
    ap.add_argument("--phase", default="slow-training")
    a = ap.parse_args()
    print(train(a.ledger, a.docs, a.workers, a.pack, a.save_every, a.phase))


if __name__ == "__main__":
    main()
