"""Compile a model with TVM alone from the records tensortune exported as MetaSchedule's
(``tensortune db export --db runs.db --format metaschedule --model M -o DIR``): TVM's own
MetaScheduleApplyDatabase schedules the fused module, TVM builds it; nothing of tensortune is
imported.

    python examples/compile_with_tvm.py DIR model.so
"""
from __future__ import annotations

import argparse
import os

import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", help="the exported folder (database_*.json and model.json)")
    p.add_argument("output", help="the shared library to write")
    a = p.parse_args()

    with open(os.path.join(a.records, "model.json")) as f:
        mod = tvm.ir.load_json(f.read())  # the fused Relax module the records belong to
    db = ms.database.JSONDatabase(work_dir=a.records, allow_missing=False)
    target = db.get_all_tuning_records()[0].target  # the machine the records were measured on
    with target, db:
        mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=True)(mod)
    lowering = tvm.transform.Sequential(cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target))
    with target:
        tvm.compile(mod, target, relax_pipeline=lowering).export_library(a.output)
    print(f"wrote {a.output}: {len(db.get_all_tuning_records())} records applied by MetaSchedule")


if __name__ == "__main__":
    main()
