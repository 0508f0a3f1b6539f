"""SQLite state: JSON documents keyed by (kind, key), the audit log and id counters.

One connection guarded by the simulator's lock; every request commits, so a restart
(or a crash) keeps what clients already saw.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (kind TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL,
                                 PRIMARY KEY (kind, key));
CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL,
                                  vendor TEXT NOT NULL, method TEXT NOT NULL, path TEXT NOT NULL,
                                  body TEXT, status INTEGER NOT NULL, box TEXT);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN")

    def commit(self) -> None:
        self._db.execute("COMMIT")
        self._db.execute("BEGIN")

    def rollback(self) -> None:
        self._db.execute("ROLLBACK")
        self._db.execute("BEGIN")

    def close(self) -> None:
        self._db.execute("COMMIT")
        self._db.close()

    def get(self, kind: str, key: str | int) -> dict[str, Any] | None:
        row = self._db.execute("SELECT body FROM docs WHERE kind=? AND key=?", (kind, str(key))).fetchone()
        if row is None:
            return None
        doc: dict[str, Any] = json.loads(row[0])
        return doc

    def put(self, kind: str, key: str | int, doc: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT INTO docs(kind, key, body) VALUES (?, ?, ?) "
            "ON CONFLICT(kind, key) DO UPDATE SET body=excluded.body",
            (kind, str(key), json.dumps(doc, sort_keys=True)),
        )

    def delete(self, kind: str, key: str | int) -> None:
        self._db.execute("DELETE FROM docs WHERE kind=? AND key=?", (kind, str(key)))

    def all(self, kind: str) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT body FROM docs WHERE kind=? ORDER BY key", (kind,)).fetchall()
        return [json.loads(r[0]) for r in rows]

    def next_id(self, counter: str, start: int) -> int:
        row = self._db.execute("SELECT v FROM meta WHERE k=?", (f"counter:{counter}",)).fetchone()
        value = start if row is None else int(row[0]) + 1
        self.set_meta(f"counter:{counter}", str(value))
        return value

    def get_meta(self, k: str) -> str | None:
        row = self._db.execute("SELECT v FROM meta WHERE k=?", (k,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, k: str, v: str) -> None:
        self._db.execute(
            "INSERT INTO meta(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v=excluded.v", (k, v)
        )

    def wipe(self) -> None:
        self._db.execute("DELETE FROM docs")
        self._db.execute("DELETE FROM audit")
        self._db.execute("DELETE FROM meta")

    def audit(
        self, *, time: float, vendor: str, method: str, path: str, body: Any, status: int, box: str | None
    ) -> None:
        self._db.execute(
            "INSERT INTO audit(time, vendor, method, path, body, status, box) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (time, vendor, method, path, json.dumps(body), status, box),
        )

    def audit_entries(self, since: int = 0) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT id, time, vendor, method, path, body, status, box FROM audit WHERE id > ? ORDER BY id",
            (since,),
        ).fetchall()
        return [
            {
                "id": r[0],
                "time": r[1],
                "vendor": r[2],
                "method": r[3],
                "path": r[4],
                "body": json.loads(r[5]),
                "status": r[6],
                "box": r[7],
            }
            for r in rows
        ]
