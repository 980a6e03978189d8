"""Tuning database: tasks and measured trials in one SQLite file, plus JSON-lines export/import."""
from .jsonl import export_jsonl, import_jsonl, import_records, read_jsonl
from .records import TaskRecord, TrialRecord
from .sqlite import Database, DatabaseError

__all__ = ["Database", "DatabaseError", "TaskRecord", "TrialRecord", "export_jsonl", "import_jsonl", "import_records", "read_jsonl"]
