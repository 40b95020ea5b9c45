"""Issue 39 item 5: an ACP agent's fs/read_text_file and fs/write_text_file open the file once,
with its resolution confined to the session's working directory: an agent swapping a file for
a symlink out of the tree while it reads never gets the outside file, and a NUL in a path is a
JSON-RPC error. The agent is tests/agents/fake_acp_agent.py, a real subprocess."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

from core.agents.protocols.acp import TranscriptItem, confined, shared_loop
from core.agents.values import PermissionPolicy
from tests.acp.conftest import FAKE, Start, texts

READS = 2000


@pytest.mark.subprocess
def test_issue_39_item_5_a_symlink_swapped_in_during_2000_reads_never_escapes(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    secret = tmp_path / "outside.txt"
    secret.write_text("OUTSIDE-SECRET")
    target = work / "notes.txt"
    target.write_text("inside")
    stop = threading.Event()

    def swap() -> None:
        # the file and a symlink out of the tree take turns at the path, each put there
        # atomically (a rename), as fast as this thread can
        link, plain = work / ".link", work / ".plain"
        while not stop.is_set():
            link.unlink(missing_ok=True)
            link.symlink_to(secret)
            os.replace(link, target)
            plain.write_text("inside")
            os.replace(plain, target)

    swapper = threading.Thread(target=swap, daemon=True)
    script = tmp_path / "script.json"  # too long for an environment variable
    script.write_text(json.dumps({"turns": [[{"read": str(target)}] * READS]}))
    agent = shared_loop().start_agent(
        [sys.executable, FAKE],
        env={"PATH": os.environ["PATH"], "FAKE_ACP_SCRIPT_FILE": str(script)},
        cwd=work,
    )
    request.addfinalizer(agent.close)
    agent.new_session(work)
    items: list[TranscriptItem] = []
    swapper.start()
    try:
        assert agent.prompt("go", on_item=items.append).ok
    finally:
        stop.set()
        swapper.join()
    said = "".join(texts(items))
    escapes = said.count("OUTSIDE-SECRET")
    inside = said.count("read: inside")
    refused = said.count("path outside the session's working directory")
    print(f"{READS} reads: {inside} inside, {refused} refused, {escapes} escapes")
    assert escapes == 0
    assert inside + refused == READS
    assert inside > 0


def test_issue_39_item_5_a_nul_in_a_path_is_a_json_rpc_error(start: Start, tmp_path: Path) -> None:
    path = str(tmp_path / "a\x00b")
    agent = start({"turns": [[{"read": path}, {"write": path, "content": "x"}]]})
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []
    assert agent.prompt("go", on_item=items.append).ok  # the turn goes on
    said = "".join(texts(items))
    assert said.count("error -32602: Invalid params") == 2, said  # not an internal error


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "O_NOFOLLOW walk"])
def test_issue_39_item_5_the_confined_open_refuses_every_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openat2: bool
) -> None:
    """Both ways of opening confined (openat2 where the kernel has it, else the O_NOFOLLOW
    walk) refuse `..`, an absolute path elsewhere and a symlink out; a file inside opens."""
    if not openat2:
        monkeypatch.setattr(confined, "_openat2_works", False)
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_text("inside")
    (tmp_path / "outside").write_text("OUT")
    (root / "out").symlink_to(tmp_path / "outside")
    (root / "dir-out").symlink_to(tmp_path)
    fd = confined.open_beneath(root, confined.relative(root, str(root / "d" / "f")), os.O_RDONLY)
    with os.fdopen(fd) as file:
        assert file.read() == "inside"
    for path in ("../outside", str(tmp_path / "outside"), "d/../../outside"):
        with pytest.raises(confined.Outside):
            confined.relative(root, path)
    for rel in ("out", "dir-out/outside"):
        with pytest.raises(confined.Outside):
            confined.open_beneath(root, rel, os.O_RDONLY)
    with pytest.raises(ValueError, match="NUL"):
        confined.relative(root, "a\0b")


@pytest.mark.subprocess
def test_issue_43_item_4_fs_refuses_what_the_room_covers_whatever_leads_there(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The files a sandboxed agent's room covers (the board's database in its working
    directory, a lock file in the database's epochs directory) are refused by the worker's
    fs/* as by the sandbox: by name, through a symlink, and for writing, which leaves the file
    as it was (not emptied before the refusal). The rest of the directory is served."""
    work = tmp_path / "work"
    (work / "board.db.epochs").mkdir(parents=True)
    board = work / "board.db"
    board.write_bytes(b"SQLite format 3\0BOARD-SECRET")
    (work / "board.db.epochs" / "lock").write_text("LOCK-SECRET")
    (work / "via-link").symlink_to(board)
    (work / "notes.txt").write_text("mine")
    steps = [
        {"read": str(board)},
        {"read": str(work / "via-link")},
        {"read": str(work / "board.db.epochs" / "lock")},
        {"write": str(board), "content": "overwritten"},
        {"write": str(work / "via-link"), "content": "overwritten"},
        {"read": str(work / "notes.txt")},
        {"write": str(work / "notes.txt"), "content": "still mine"},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [steps]}))
    covered = frozenset({str(board.resolve()), str((work / "board.db.epochs").resolve())})
    agent = shared_loop().start_agent(
        [sys.executable, FAKE],
        env={"PATH": os.environ["PATH"], "FAKE_ACP_SCRIPT_FILE": str(script)},
        cwd=work,
        policy=PermissionPolicy(unseen=covered),
    )
    request.addfinalizer(agent.close)
    agent.new_session(work)
    items: list[TranscriptItem] = []
    assert agent.prompt("go", on_item=items.append).ok
    said = "".join(texts(items))
    assert "SECRET" not in said
    # by name; the link is refused as every link is (item 5), before it reaches the check
    assert said.count("path hidden by the agent's sandbox") == 3, said
    assert said.count("path outside the session's working directory") == 2, said
    assert "read: mine" in said
    assert board.read_bytes() == b"SQLite format 3\0BOARD-SECRET"
    assert (work / "notes.txt").read_text() == "still mine"
