"""tensortune's benchmarks: ``python -m bench run|report`` (the suite) and the per-issue scripts."""
