"""Reading the package's JSON records: one JSON file, or one JSON record per line (metrics.jsonl).

A foundation module (it imports only errors), so every layer reads records the same way and a
corrupt file is one user error naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ebd2n.errors import UserError


def read_json(path: Path) -> Any:
    """A JSON file's content, None when absent; a corrupt file is a user error naming it."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path}: cannot read JSON ({error})") from error


def read_jsonl(path: Path) -> list[Any]:
    """Every record of a JSON-lines file ([] when absent); a corrupt line is a user error naming it."""
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise UserError(f"{path}:{number}: not a JSON record ({error})") from error
    return records
