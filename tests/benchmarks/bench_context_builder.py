"""Context builder cost (issue: the context builder, efficiency).

Prints, measured in one run on this machine, for 100 contexts per target length (8K ... 256K
tokens of the offline default tokenizer) built from a synthetic pool of ~1.2M tokens:

  * build time per length (seconds for 100 contexts) and per context;
  * the ratio of build time to the pure tokenization time of the same 100 texts (one
    ``tokenizer.count`` of each built context, timed right after its build so that both see the
    same load of a shared machine): the builder counts each context about once, so the ratio
    shows what drawing, joining and repairing add on top;
  * the achieved fill (min / mean of context tokens / target), never above 1.

The pool is tokenized once before the timing (its load time is printed separately).

Run: .venv/bin/python tests/benchmarks/bench_context_builder.py [n_contexts]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from raylc.suites.context import build_context, pool_from_frame  # noqa: E402
from raylc.text.tokenize import get_tokenizer  # noqa: E402

LENGTHS = [8192, 16384, 32768, 65536, 131072, 262144]
WORDS = ("the river harbour lantern copper orchard ledger meadow signal granary chapel festival kettle bridge "
         "mill archive tide clay loom pulley barley council measured reported ancient quiet northern winter "
         "merchants counted repaired described").split()


def synthetic_pool(n_docs: int, seed: int = 0) -> pl.DataFrame:
    """``n_docs`` documents of 40 to 3,000 words (log-uniform), sentences of 6-14 words."""
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(np.log(40), np.log(3000), n_docs)).astype(int)
    words = rng.choice(WORDS, size=int(sizes.sum()))
    texts, at = [], 0
    for i, n in enumerate(sizes):
        w = words[at:at + n]
        at += n
        cuts = np.cumsum(rng.integers(6, 15, size=n // 6 + 1))
        cuts = cuts[cuts < n]
        sentences = [" ".join(s).capitalize() + "." for s in np.split(w, cuts) if len(s)]
        texts.append(f"Document {i}. " + " ".join(sentences))
    return pl.DataFrame({"text": texts})


def main(n: int = 100) -> None:
    tok = get_tokenizer()
    t0 = time.perf_counter()
    frame = synthetic_pool(1800)
    t1 = time.perf_counter()
    pool = pool_from_frame(frame, tok, source="synthetic")
    pool.framing()
    t2 = time.perf_counter()
    print(f"pool: {len(pool)} documents, {int(pool.tokens.sum()):,} tokens; generated in {t1 - t0:.1f} s, "
          f"validated + tokenized once in {t2 - t1:.1f} s")
    print(f"{'length':>8} {'build s':>8} {'ms/ctx':>8} {'count s':>8} {'ratio':>6} {'min fill':>9} {'mean fill':>9}")
    for length in LENGTHS:
        rng = np.random.default_rng(length)
        required = ["The gold passage of this sample says that the lantern festival starts at dawn."]
        build_s = count_s = 0.0
        built, counts = [], []
        for _ in range(n):  # each build timed next to a count of its text: both see the same machine load
            t = time.perf_counter()
            built.append(build_context(length, pool, rng, required=required))
            t2 = time.perf_counter()
            counts.append(tok.count(built[-1].text))
            t3 = time.perf_counter()
            build_s += t2 - t
            count_s += t3 - t2
        assert counts == [c.tokens for c in built] and max(counts) <= length
        fills = np.array(counts) / length
        print(f"{length:>8} {build_s:>8.2f} {1000 * build_s / n:>8.1f} {count_s:>8.2f} {build_s / count_s:>6.2f} "
              f"{fills.min():>9.4f} {fills.mean():>9.4f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n_contexts", type=int, nargs="?", default=100, help="contexts per target length (default 100)")
    main(ap.parse_args().n_contexts)
