from __future__ import annotations

import errno
import json
import zlib
from pathlib import Path

import pytest

from rekall.states import JobState
from rekall.store import FileOps, JournalCorrupt, JournalUnusable, UnknownRecordVersion
from rekall.store.journal import JournalWriter, scan_journal
from rekall.store.wire import NoteRecord, TransitionRecord, decode_line, encode_record


def _note(seq: int) -> NoteRecord:
    return NoteRecord(seq=seq, at="2026-11-30T12:00:00.000Z", mono_ms=seq, kind="probe", detail={"n": seq, "x": "я"})


def _journal(tmp_path: Path, count: int = 3) -> Path:
    path = tmp_path / "j.journal.jsonl"
    path.write_bytes(b"".join(encode_record(_note(i)) for i in range(count)))
    return path


def _raw(record: dict) -> bytes:
    body = json.dumps(record, separators=(",", ":")).encode()
    return b'{"crc32":"%08x","record":%s}\n' % (zlib.crc32(body), body)


def test_a_record_round_trips_through_its_checksummed_line():
    record = TransitionRecord(seq=1, at="t", mono_ms=5, trigger="compaction_accepted", source=JobState.REQUESTING,
                              dest=JobState.ACCEPTED, evidence={"ownerId": "o"}, fields={"acceptedAt": "t"})
    line = encode_record(record)
    assert json.loads(line)["record"]["from"] == "requesting"
    assert decode_line(line) == record


def test_every_intact_line_is_read_back(tmp_path: Path):
    scan = scan_journal(_journal(tmp_path))
    assert [r.seq for r in scan.records] == [0, 1, 2] and scan.torn_bytes == 0


def test_a_flipped_byte_in_a_middle_line_is_reported_with_its_line_number(tmp_path: Path):
    path = _journal(tmp_path)
    data = bytearray(path.read_bytes())
    data[data.index(b'"n":1') + 4] = ord("7")  # still JSON, checksum now wrong
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt, match="line 2"):
        scan_journal(path)
    assert path.read_bytes() == bytes(data)  # reported, nothing cut or repaired


@pytest.mark.parametrize("cut", [1, 10, 40, -2, -1])
def test_a_torn_last_line_is_ignored_by_readers_and_cut_by_the_next_writer(tmp_path: Path, cut: int):
    path = _journal(tmp_path)
    whole = path.read_bytes()
    last = encode_record(_note(2))
    torn = whole[: len(whole) - len(last) + (cut if cut > 0 else len(last) + cut)]
    path.write_bytes(torn)
    scan = scan_journal(path)
    assert [r.seq for r in scan.records] == [0, 1] and scan.torn_bytes > 0
    assert path.read_bytes() == torn  # reading never changes the file
    writer = JournalWriter.open(path, scan, FileOps())
    writer.append(_note(2))
    writer.close()
    assert path.read_bytes() == whole


def test_a_zero_filled_tail_after_power_loss_counts_as_torn(tmp_path: Path):
    path = _journal(tmp_path)
    with path.open("ab") as handle:
        handle.write(b"\0" * 300)
    assert scan_journal(path).torn_bytes == 300


def test_a_record_of_an_unknown_version_is_refused_not_cut(tmp_path: Path):
    path = _journal(tmp_path, 1)
    with path.open("ab") as handle:
        handle.write(_raw({"v": 4, "type": "note", "seq": 1}))
    before = path.read_bytes()
    with pytest.raises(UnknownRecordVersion, match="version 4"):
        scan_journal(path)
    assert path.read_bytes() == before


def test_an_intact_line_of_the_wrong_shape_is_corruption(tmp_path: Path):
    path = _journal(tmp_path, 1)
    with path.open("ab") as handle:
        handle.write(_raw({"v": 1, "type": "note", "seq": 1, "at": "t", "monoMs": 1, "kind": "k", "detail": {},
                           "smuggled": True}))
    with pytest.raises(JournalCorrupt, match="smuggled"):
        scan_journal(path)


def test_corruption_keeps_what_the_decoder_found_as_its_cause(tmp_path: Path):
    path = _journal(tmp_path, 1)
    with path.open("ab") as handle:
        handle.write(_raw({"v": 1, "type": "note", "seq": 1, "at": "t", "monoMs": "one", "kind": "k", "detail": {}}))
        handle.write(encode_record(_note(2)))
    with pytest.raises(JournalCorrupt, match="line 2") as raised:
        scan_journal(path)
    assert raised.value.__cause__ is not None  # the record decoder's own finding, for the log
    assert "mono_ms" in str(raised.value.__cause__)


def test_a_failed_fsync_takes_back_the_record_and_refuses_further_writes(tmp_path: Path):
    path = _journal(tmp_path, 2)
    before = path.read_bytes()

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    writer = JournalWriter.open(path, scan_journal(path), FileOps()._replace(fsync=failing_fsync))
    with pytest.raises(JournalUnusable, match="I/O error"):
        writer.append(_note(2))
    assert path.read_bytes() == before  # the undurable bytes were cut back
    with pytest.raises(JournalUnusable, match="refuses writes"):
        writer.append(_note(2))  # never retried on the same handle
    writer.close()


def test_a_second_writer_is_detected_before_it_can_interleave(tmp_path: Path):
    path = _journal(tmp_path, 1)
    scan = scan_journal(path)
    first, second = JournalWriter.open(path, scan, FileOps()), JournalWriter.open(path, scan, FileOps())
    first.append(_note(1))
    with pytest.raises(JournalUnusable, match="someone else"):
        second.append(_note(1))
    first.close(), second.close()
    assert [r.seq for r in scan_journal(path).records] == [0, 1]


def test_a_second_writer_forced_between_the_length_check_and_the_append_is_refused(tmp_path: Path):
    path = _journal(tmp_path, count=1)
    second = JournalWriter.open(path, scan_journal(path), FileOps())
    refused: list[JournalUnusable] = []

    def write_after_the_other_writer(fd: int, data: bytes) -> int:
        # The first writer has checked the file's length; the second tries to append now.
        try:
            second.append(_note(1))
        except JournalUnusable as exc:
            refused.append(exc)
        return FileOps().write(fd, data)

    first = JournalWriter.open(path, scan_journal(path), FileOps()._replace(write=write_after_the_other_writer))
    first.append(_note(1))
    assert refused and "another process" in refused[0].message
    assert [r.seq for r in scan_journal(path).records] == [0, 1]  # one record 1, whole: nothing interleaved
    first.close()
    second.close()


def test_a_journal_larger_than_rekall_reads_is_reported_not_loaded(tmp_path: Path):
    from rekall.store.fsread import JOURNAL_LIMIT

    path = _journal(tmp_path, count=1)
    with path.open("r+b") as handle:
        handle.truncate(JOURNAL_LIMIT + 1)  # sparse: costs no disk
    with pytest.raises(JournalCorrupt, match="over the limit"):
        scan_journal(path)
