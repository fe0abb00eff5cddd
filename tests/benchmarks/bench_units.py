"""Unit splitting is linear in the document length (raylc.text.units).

Generates documents of 32K, 64K, 128K and 256K tokens (counted with the default
tokenizer; paragraphs of 2-8 lines of filler sentences), splits each with the specs
``s``, ``ls``, ``b`` (and ``rlt``, ``c``), and prints the time of each as a ratio to the 32K
time: linear time gives about 2, 4, 8. Each cell is the minimum process CPU time over
``ROUNDS`` rounds that visit every (spec, size) in turn, so a busy machine skews all cells
alike (run it twice anyway). Small documents fit in the CPU caches and large ones do not,
which alone pushes the 256K ratio a little above 8.

    .venv/bin/python tests/benchmarks/bench_units.py [--sizes 32768,...,1048576]

The "per doubling" column (each size's time over the previous one's) tends to 2 past the
cache sizes if the work is linear.
"""

from __future__ import annotations

import time

import numpy as np

from raylc.suites.planted import _filler
from raylc.text.tokenize import get_tokenizer
from raylc.text.units import split_units

SIZES = (32_768, 65_536, 131_072, 262_144)
SPECS = ("s", "ls", "b", "rlt", "c")


def document(tokens: int, seed: int = 0) -> str:
    """Filler text of about ``tokens`` default-tokenizer tokens (trimmed to the exact count's neighbourhood)."""
    rng = np.random.default_rng(seed)
    sentences = _filler(rng, tokens // 8 + 16)
    paragraph = rng.integers(2, 9, len(sentences))
    sep = np.where(np.cumsum(paragraph) % 5 == 0, "\n\n", np.where(paragraph % 3 == 0, "\n", " "))
    text = "".join(s + str(e) for s, e in zip(sentences, sep))
    pieces = get_tokenizer().pieces(text)
    return "".join(pieces[:tokens])


ROUNDS = 7


def cpu_time(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main(sizes: tuple[int, ...] = SIZES) -> None:
    tok = get_tokenizer()
    docs = {n: document(n) for n in sizes}
    print("tokens:", {n: tok.count(d) for n, d in docs.items()}, "chars:", {n: len(d) for n, d in docs.items()})
    head = " ".join(f"{n // 1024}K/{sizes[0] // 1024}K".rjust(10) for n in sizes[1:])
    print(f"{'spec':>5} {'units@max':>10} {'t_min (s)':>9} {head}   per doubling")
    best = {(spec, n): float("inf") for spec in SPECS for n in sizes}
    for _ in range(ROUNDS):
        for spec in SPECS:
            for n in sizes:
                best[spec, n] = min(best[spec, n], cpu_time(lambda n=n, spec=spec: split_units(docs[n], spec)))
    for spec in SPECS:
        base = best[spec, sizes[0]]
        ratios = " ".join(f"{best[spec, n] / base:10.2f}" for n in sizes[1:])
        doubling = " ".join(f"{best[spec, b] / best[spec, a]:.2f}" for a, b in zip(sizes, sizes[1:]))
        print(f"{spec:>5} {len(split_units(docs[sizes[-1]], spec)):>10} {base:9.4f} {ratios}   {doubling}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="comma-separated document sizes in tokens, doubling (e.g. up to 1048576)")
    main(tuple(int(x) for x in parser.parse_args().sizes.split(",")))
