"""The on-disk formats, owned by one cattrs converter: journal records and the lock file.

A journal line is one JSON object: ``{"crc32":"<8 hex>","record":{...}}`` followed by a
newline. The checksum covers the exact bytes of the record object as written (no
re-serialisation is needed to check it), and the line is still plain JSON for ``jq``.

A record carries ``v`` (its schema version: 1; 2 since the platform is named; 3 since the delivery
has a machine of its own) and ``type``: ``transition`` (a move of the compaction machine, or, in
versions 1 and 2, of the single machine before the split: :mod:`rekall.store.legacy` reads those),
``delivery`` (a move of the delivery machine, with its route) or ``note``. Reading is strict:
unknown keys, a wrong type or an unknown version are errors, never guesses.
"""

from __future__ import annotations

import json
import re
import zlib
from functools import cache
from typing import Any

import attrs

from rekall.states import DeliveryState, GuardVerdict, JobState
from rekall.states.model import MachineState
from rekall.store.processes import LockHolder

#: 2: the worker's ``worker_started`` and ``connected`` evidence names the platform. 3: the delivery
#: machine's moves are ``delivery`` records; ``transition`` records are the compaction machine's.
RECORD_VERSION = 3
#: Every version this rekall reads. Version 1 records have the same shape as version 2's.
READABLE_VERSIONS = frozenset({1, 2, 3})


@attrs.frozen(kw_only=True)
class TransitionRecord:
    seq: int
    at: str
    mono_ms: int
    trigger: str
    source: JobState | None
    dest: JobState
    evidence: dict[str, Any]
    guards: tuple[GuardVerdict, ...] = ()
    fields: dict[str, Any]


@attrs.frozen(kw_only=True)
class DeliveryRecord:
    """A move of the delivery machine; ``route`` is the delivery's route after it."""

    seq: int
    at: str
    mono_ms: int
    trigger: str
    source: DeliveryState
    dest: DeliveryState
    route: str | None
    evidence: dict[str, Any]
    guards: tuple[GuardVerdict, ...] = ()
    fields: dict[str, Any]


@attrs.frozen(kw_only=True)
class NoteRecord:
    """An observation that changes no state (a reconnect, a resync, the owner moving)."""

    seq: int
    at: str
    mono_ms: int
    kind: str
    detail: dict[str, Any]


Record = TransitionRecord | DeliveryRecord | NoteRecord
#: A move of either machine.
Move = TransitionRecord | DeliveryRecord
_TYPES: dict[str, type[Record]] = {"transition": TransitionRecord, "delivery": DeliveryRecord, "note": NoteRecord}
_TYPE_OF = {cls: name for name, cls in _TYPES.items()}

@cache
def converter() -> Any:
    """The cattrs converter that owns the formats. Built on first use: a reader whose records are
    all well-formed never needs it (see :func:`_read_plainly`), so `status` starts without cattrs."""
    import cattrs
    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

    made = cattrs.Converter()

    def register(cls: type, *, strict: bool, **renames: str) -> None:
        overrides = {name: override(rename=wire) for name, wire in renames.items()}
        made.register_structure_hook(
            cls, make_dict_structure_fn(cls, made, _cattrs_forbid_extra_keys=strict, **overrides))
        made.register_unstructure_hook(cls, make_dict_unstructure_fn(cls, made, **overrides))

    register(TransitionRecord, strict=True, **_RENAMES[TransitionRecord])
    register(DeliveryRecord, strict=True, **_RENAMES[DeliveryRecord])
    register(NoteRecord, strict=True, **_RENAMES[NoteRecord])
    made.register_structure_hook(MachineState, lambda value, _: state_named(value))
    register(GuardVerdict, strict=True)
    # The lock is read leniently: the Node version wrote only jobId and threadId.
    register(LockHolder, strict=False, **_RENAMES[LockHolder])
    return made


_RENAMES: dict[type, dict[str, str]] = {
    TransitionRecord: {"mono_ms": "monoMs", "source": "from", "dest": "to"},
    DeliveryRecord: {"mono_ms": "monoMs", "source": "from", "dest": "to"},
    NoteRecord: {"mono_ms": "monoMs"},
    LockHolder: {"job_id": "jobId", "thread_id": "threadId", "process_start_time": "processStartTime",
                "created_at": "createdAt", "jobs_dir": "jobsDir"},
}
#: The JSON type each field has when a record is written by this rekall: bool, int, str, dict, a
#: (state enum, nullable) pair or an optional str; anything else (lists of guards aside) is left to cattrs.
_PLAIN: dict[type, dict[str, Any]] = {
    TransitionRecord: {"seq": int, "at": str, "monoMs": int, "trigger": str, "from": (JobState, True),
                       "to": (JobState, False), "evidence": dict, "guards": list, "fields": dict},
    DeliveryRecord: {"seq": int, "at": str, "monoMs": int, "trigger": str, "from": (DeliveryState, False),
                     "to": (DeliveryState, False), "route": (str, True), "evidence": dict, "guards": list,
                     "fields": dict},
    NoteRecord: {"seq": int, "at": str, "monoMs": int, "kind": str, "detail": dict},
}
#: Both machines' states by value (the values differ, so a guard's ``to`` names one state).
_STATES: dict[str, MachineState] = {state.value: state for enum in (JobState, DeliveryState) for state in enum}


def state_named(value: Any) -> MachineState:
    if type(value) is not str or value not in _STATES:
        raise ValueError(f"{value!r:.40} is not a state")
    return _STATES[value]


def _plain(value: Any, kind: Any) -> tuple[bool, Any]:
    """``(True, structured value)`` when ``value`` already has exactly the written type, else ``(False, None)``."""
    if isinstance(kind, tuple):
        of, nullable = kind
        if value is None:
            return nullable, None
        if of is str:
            return type(value) is str, value
        state = _STATES.get(value) if type(value) is str else None
        return type(state) is of, state
    if kind is list:  # the guards: a list of {to, guard, passed}
        if type(value) is not list:
            return False, None
        verdicts = []
        for item in value:
            if not (type(item) is dict and item.keys() == {"to", "guard", "passed"} and type(item["guard"]) is str
                    and type(item["passed"]) is bool and type(item["to"]) is str and item["to"] in _STATES):
                return False, None
            verdicts.append(GuardVerdict(to=_STATES[item["to"]], guard=item["guard"], passed=item["passed"]))
        return True, tuple(verdicts)
    if type(value) is not kind:
        return False, None
    if kind is dict and not all(type(key) is str for key in value):
        return False, None
    return True, value


def _read_plainly(data: dict[str, Any], cls: type) -> Any:
    """The record built directly, when ``data`` is exactly what :func:`encode_record` writes; else ``None``.

    Only for records whose every field already has its written type, so the result is the one
    cattrs would give; anything unusual (a missing or extra key, a float for an int) goes to cattrs,
    which structures it or names what is wrong.
    """
    kinds = _PLAIN[cls]
    if data.keys() != kinds.keys():
        return None
    renames = {wire: name for name, wire in _RENAMES[cls].items()}
    values = {}
    for key, kind in kinds.items():
        ok, value = _plain(data[key], kind)
        if not ok:
            return None
        values[renames.get(key, key)] = value
    return cls(**values)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class Garbled(ValueError):
    """The bytes are not a whole, intact line (a torn write, or damage)."""


class BadRecord(ValueError):
    """An intact line whose record does not have the expected shape."""


class NewerVersion(ValueError):
    def __init__(self, version: object) -> None:
        super().__init__(version)
        self.version = version


def encode_record(record: Record) -> bytes:
    written = _written_plainly(record)
    if written is None:
        written = {"v": RECORD_VERSION, "type": _TYPE_OF[type(record)], **converter().unstructure(record)}
    raw = dumps(written).encode("utf-8")
    return b'{"crc32":"%08x","record":%s}\n' % (zlib.crc32(raw), raw)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _native(value: Any) -> bool:
    """JSON's own types all the way down (exact types, string keys): what cattrs gives back as it is."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is dict:
        return all(type(key) is str and _native(item) for key, item in value.items())
    if kind is list:
        return all(_native(item) for item in value)
    return False


def _written_plainly(record: Record) -> dict[str, Any] | None:
    """The JSON object :func:`encode_record` writes for ``record``, built by hand, when every
    field has the type it is declared with and the free-form dicts hold only JSON's own types;
    else ``None`` (cattrs unstructures the rest).

    The mirror of :func:`_read_plainly`, for the worker's commit path: it writes a record before
    every request, and this costs a fraction of the converter (and never builds it). The keys
    and their order are the converter's; a test holds the two byte-equal."""
    if isinstance(record, (TransitionRecord, DeliveryRecord)):
        delivery = isinstance(record, DeliveryRecord)
        route = record.route if isinstance(record, DeliveryRecord) else None
        source, enum = record.source, DeliveryState if delivery else JobState
        if not (type(record.seq) is int and type(record.mono_ms) is int and type(record.at) is str
                and type(record.trigger) is str and (source is None or type(source) is enum)
                and type(record.dest) is enum and type(record.guards) is tuple
                and all(type(g) is GuardVerdict and type(g.to) in (JobState, DeliveryState) and type(g.guard) is str
                        and type(g.passed) is bool for g in record.guards)
                and _native(record.evidence) and _native(record.fields) and type(route) in (str, type(None))):
            return None
        written = {"v": RECORD_VERSION, "type": "delivery" if delivery else "transition", "seq": record.seq,
                   "at": record.at, "monoMs": record.mono_ms, "trigger": record.trigger,
                   "from": None if source is None else source.value, "to": record.dest.value}
        if delivery:
            written["route"] = route
        return {**written, "evidence": record.evidence,
                "guards": [{"to": g.to.value, "guard": g.guard, "passed": g.passed} for g in record.guards],
                "fields": record.fields}
    if (type(record) is NoteRecord and type(record.seq) is int and type(record.mono_ms) is int
            and type(record.at) is str and type(record.kind) is str and _native(record.detail)):
        return {"v": RECORD_VERSION, "type": "note", "seq": record.seq, "at": record.at, "monoMs": record.mono_ms,
                "kind": record.kind, "detail": record.detail}
    return None


_LINE = re.compile(rb'\A\{"crc32":"([0-9a-f]{8})","record":(.*)\}\n\Z', re.DOTALL)


def decode_line(line: bytes) -> Record:
    match = _LINE.match(line)
    if match is None:
        raise Garbled("not a complete journal line")
    crc, body = match.groups()
    if int(crc, 16) != zlib.crc32(body):
        raise Garbled("checksum mismatch")
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Garbled(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRecord("the record is not an object")
    version = data.pop("v", None)
    if not isinstance(version, int) or version not in READABLE_VERSIONS:  # never hash a list
        raise NewerVersion(version)
    cls = _TYPES.get(data.pop("type", None))  # type: ignore[arg-type]
    if cls is None:
        raise BadRecord("unknown record type")
    plain = _read_plainly(data, cls)
    if plain is not None:
        return plain
    import cattrs

    try:
        return converter().structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        problems = cattrs.transform_error(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
        raise BadRecord("; ".join(problems)) from exc


def encode_lock(holder: LockHolder) -> bytes:
    return (json.dumps(converter().unstructure(holder), indent=2) + "\n").encode("utf-8")


def decode_lock(raw: bytes) -> LockHolder:
    """Raises ``ValueError`` with a reason when the lock is unreadable."""
    import cattrs

    try:
        data = json.loads(raw.decode("utf-8"))
        return converter().structure(data, LockHolder)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    except (cattrs.BaseValidationError, TypeError, KeyError) as exc:
        problems = cattrs.transform_error(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
        raise ValueError("; ".join(problems)) from exc
