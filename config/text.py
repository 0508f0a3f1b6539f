"""How a config value is quoted in an error line: whole when short, cut when long.

A 10,000-character name must not become a 10,000-character error line; 100 characters are enough to
recognise the value. No imports from the rest of config/ (models.py uses this too).
"""

from __future__ import annotations

QUOTE_LIMIT = 100


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """`'value'`, cut to `limit` characters with '...' when longer."""
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"'{text}'"
