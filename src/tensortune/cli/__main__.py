"""``python -m tensortune.cli``."""
import sys

from . import main

sys.exit(main())
