"""Fuzz saved model files: N seeded mutants loaded and predicted in subprocesses.

Half the mutants damage an ``XGBCRFClassifier`` file, half an
``LGBMCRFClassifier`` file (see ``tests/fuzz_models.py`` for the mutations and
outcomes). Prints the tally and every failure (a crash, a hang, an
allocation beyond ``--memory-mb``, an error other than a ``ValueError``
naming the file); exits 1 if there was any.

    python benchmarks/fuzz_models.py            # 10,000 mutants
    python benchmarks/fuzz_models.py -n 2000 --seed 7
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz_models import fuzz  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000, help="mutants in all (default 10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per mutant")
    parser.add_argument("--memory-mb", type=int, default=400,
                        help="address space a worker may add after its imports")  # fmt: skip
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        counts, failures = fuzz(folder, args.n // 2, args.seed, args.timeout, args.memory_mb)
        for path, what, outcome in failures:
            print(f"FAIL {path.name} ({what}): {outcome}")
    print(f"{sum(counts.values())} mutants, seed {args.seed}, "
          f"{time.perf_counter() - t0:.0f} s:")  # fmt: skip
    for outcome, count in counts.items():
        print(f"  {outcome:<14}{count:>7}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
