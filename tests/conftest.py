"""Settings every test shares."""
from __future__ import annotations

import os
from typing import Iterator

import pytest

# The suite's own processes (builders, runners, two tuners at once, Ray actors, RPC servers) keep
# this 2-core machine busy, so a run's wait for a quiet spell before it re-measures its finalists
# would mostly run out: at most 0.6 s here (two looks), not QUIET_WAIT_S (set before any test
# starts, so that the commands and actors the tests start inherit it). Tests of the wait pass
# quiet_wait_s.
os.environ.setdefault("TENSORTUNE_QUIET_WAIT_S", "0.6")


@pytest.fixture(autouse=True, scope="session")
def _xgboost_one_thread() -> Iterator[None]:
    """XGBoost on one thread. The tests' fits have tens to hundreds of rows; with one OpenMP
    thread per core on a busy 2-core machine every boosting round waits for a descheduled
    thread (seen here: a 120-trial autotvm run took 15 s instead of 0.4 s, same results)."""
    import xgboost

    with xgboost.config_context(nthread=1):
        yield

