"""Settings every test shares."""
from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _xgboost_one_thread() -> Iterator[None]:
    """XGBoost on one thread. The tests' fits have tens to hundreds of rows; with one OpenMP
    thread per core on a busy 2-core machine every boosting round waits for a descheduled
    thread (seen here: a 120-trial autotvm run took 15 s instead of 0.4 s, same results)."""
    import xgboost

    with xgboost.config_context(nthread=1):
        yield

