"""Issue 20's two figures in one JSON object: importing a month of jobs users submitted to Slurm
directly (``bench/native_import.py``: parse ``sacct`` output and record it, target ≤ 60 s for
100,000 jobs) and the Slurm accounts sync's desired-vs-current diff (``bench/native_accounts.py``:
1,000 accounts × 5 flavors, target ≤ 1 s). Each part is documented in its own script.

    python bench/native.py [--jobs 100000] [--accounts 1000] [--flavors 5]

Needs DATABASE_URL and REDIS_URL (the import runs in a scratch database).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import native_accounts
import native_import


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--accounts", type=int, default=1000)
    parser.add_argument("--flavors", type=int, default=5)
    args = parser.parse_args()
    imported = native_import.run(args.jobs)
    diffed = native_accounts.run(args.accounts, args.flavors)
    print(json.dumps({**imported, **diffed}))


if __name__ == "__main__":
    main()
