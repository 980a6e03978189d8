"""Tuning database: tasks and measured trials in one SQLite file, plus JSON-lines export/import."""
from .jsonl import (ImportReport, ParsedRecords, TrialCheck, check_records, export_jsonl, import_jsonl,
                    import_records, parse_jsonl, read_jsonl)
from .records import (ERROR_KINDS, MeasureContext, TaskRecord, TrialRecord, confirmed_best, describe_timing,
                      latest_confirmation, top_configs)
from .sqlite import Database, DatabaseError

__all__ = ["Database", "DatabaseError", "ERROR_KINDS", "ImportReport", "MeasureContext", "ParsedRecords",
           "TaskRecord", "TrialCheck", "TrialRecord", "check_records", "confirmed_best", "describe_timing",
           "export_jsonl", "import_jsonl", "import_records", "latest_confirmation", "parse_jsonl", "read_jsonl",
           "top_configs"]
