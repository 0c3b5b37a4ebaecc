"""The chat-template tokens wrapped around every turn (built by :mod:`.chat_template`)."""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("system", "user", "assistant")


@dataclass
class Framing:
    """Chat-template tokens wrapped around every turn of a role (see :mod:`.chat_template`)."""

    prefix: dict[str, tuple[list[int], list[str]]]
    suffix: dict[str, tuple[list[int], list[str]]]

    @classmethod
    def none(cls) -> "Framing":
        empty = {role: ([], []) for role in ROLES}
        return cls(prefix=dict(empty), suffix=dict(empty))
