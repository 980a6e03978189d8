"""``python -m bench``: the benchmark suite (see ``bench/suite/cli.py``)."""
from .suite.cli import main

raise SystemExit(main())
