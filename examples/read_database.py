"""Read a tuning database: every task's best config, how it was measured, and its errors.

    python examples/read_database.py smallnet.db
"""
from __future__ import annotations

import argparse
from collections import Counter

from tensortune.database import Database


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("db", help="a database written by tensortune")
    a = p.parse_args()

    with Database(a.db, readonly=True) as db:
        for task, best in db.best_all():
            errors = Counter(t.error for t in db.trials(task.workload_key) if t.error != "none")
            print(f"{task.op} [{task.workload_key[:8]}]: best {best.cost * 1e3:.4f} ms of {db.count(task.workload_key)} "
                  f"search trials "
                  f"({best.context.describe()}); config {best.config}; errors {dict(errors) or 'none'}")


if __name__ == "__main__":
    main()
