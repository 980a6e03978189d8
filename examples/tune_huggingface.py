"""Tune a Hugging Face model definition (random weights: no download) and profile it.

    python examples/tune_huggingface.py                                  # a small BERT
    python examples/tune_huggingface.py --spec "hf:resnet:depths=[1,1]"  # any hf:MODEL_TYPE[:key=value,...]

Needs the ``hf`` extra (``pip install tensortune[hf]``).
"""
from __future__ import annotations

import argparse

import tensortune

#: A two-layer BERT at sequence length 32: small enough to tune in minutes.
SMALL_BERT = "hf:bert:num_hidden_layers=2,hidden_size=64,num_attention_heads=2,intermediate_size=128,seq_len=32"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default=SMALL_BERT, help="hf:MODEL_TYPE[:key=value,...] or a save_pretrained folder")
    p.add_argument("--trials", type=int, default=None, help="trials per task (default: 5 minutes in all)")
    p.add_argument("--db", default="hf.db", help="tuning records (a rerun resumes)")
    a = p.parse_args()

    budget = tensortune.Budget(trials=a.trials) if a.trials else tensortune.Budget(wall_s=300)
    tuned = tensortune.tune_model(a.spec, budget=budget, database=a.db)
    print(tuned.profile(runs=3, peak=False).table(5))  # the five heaviest functions of the tuned model


if __name__ == "__main__":
    main()
