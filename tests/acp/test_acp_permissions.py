"""AGENTS.md "Profiles" `--permissions ask|allow|deny` and `--auto-allow KIND,...`, and the
client's file system confined to the session's working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.agents.protocols.acp import PermissionPolicy, PermissionRequest, TranscriptItem
from core.agents.protocols.acp.client import laneway_tool
from tests.acp.conftest import Start, texts

ASK_EDIT = [{"permission": {"kind": "edit", "title": "Edit main.py"}}]


def decided(start: Start, tmp_path: Path, policy: PermissionPolicy, **kw: object) -> list[str]:
    agent = start({"turns": [ASK_EDIT]}, policy=policy)
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []
    assert agent.prompt("go", on_item=items.append, **kw).ok  # type: ignore[arg-type]
    permission = [i for i in items if i.kind == "permission"]
    assert len(permission) == 1
    return [str(permission[0].data["decided_by"]), *texts(items)[1:]]


def test_allow_picks_the_first_allow_option(start: Start, tmp_path: Path) -> None:
    """`--permissions allow`: the request's first allow_once/allow_always option."""
    assert decided(start, tmp_path, PermissionPolicy("allow")) == [
        "policy:allow",
        "permission: yes",
    ]


def test_deny_picks_the_first_reject_option(start: Start, tmp_path: Path) -> None:
    """`--permissions deny`: the request's first reject_once/reject_always option."""
    assert decided(start, tmp_path, PermissionPolicy("deny")) == ["policy:deny", "permission: no"]


def test_auto_allow_kinds_are_allowed_whatever_the_mode(start: Start, tmp_path: Path) -> None:
    """`--auto-allow edit`: allowed without asking, though `--permissions deny`."""
    policy = PermissionPolicy("deny", frozenset({"edit"}))
    assert decided(start, tmp_path, policy) == ["auto-allow", "permission: yes"]


def test_ask_hands_the_request_to_the_callers_thread(start: Start, tmp_path: Path) -> None:
    """`--permissions ask`: the caller's callback answers (a person, later), on its thread."""
    seen: list[PermissionRequest] = []

    def person(request: PermissionRequest) -> str:
        seen.append(request)
        return "always"

    result = decided(start, tmp_path, PermissionPolicy("ask"), on_permission=person)
    assert result == ["person", "permission: always"]
    assert seen[0].tool_kind == "edit"
    assert [o.kind for o in seen[0].options] == ["allow_once", "allow_always", "reject_once"]


def test_fs_reads_and_writes_inside_cwd(start: Start, tmp_path: Path) -> None:
    """fs/read_text_file and fs/write_text_file within the session's working directory."""
    (tmp_path / "notes.txt").write_text("hello")
    agent = start(
        {"turns": [[{"read": str(tmp_path / "notes.txt")},
                    {"write": str(tmp_path / "sub" / "out.txt"), "content": "x"}]]}
    )  # fmt: skip
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []
    assert agent.prompt("go", on_item=items.append).ok
    # back-to-back chunks are one message item
    assert "".join(texts(items)).endswith("read: hellowrote")
    assert (tmp_path / "sub" / "out.txt").read_text() == "x"


@pytest.mark.parametrize("where", ["../secret.txt", "/etc/passwd", "link/secret.txt"])
def test_fs_outside_cwd_is_a_json_rpc_error(start: Start, tmp_path: Path, where: str) -> None:
    """Issue 29 hostile agents: "a file read outside its working directory" is a JSON-RPC
    error back to the agent (symlinks out included); the turn goes on."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "secret.txt").write_text("s3cret")
    (work / "link").symlink_to(tmp_path)
    path = where if where.startswith("/") else str(work / where)
    agent = start({"turns": [[{"read": path}, {"write": path, "content": "pwned"}]]}, cwd=work)
    agent.new_session(work)
    items: list[TranscriptItem] = []
    assert agent.prompt("go", on_item=items.append).ok
    refused = "error -32602: path outside the session's working directory"
    assert "".join(texts(items)).endswith(refused + refused)
    assert (tmp_path / "secret.txt").read_text() == "s3cret"


@pytest.mark.parametrize(
    ("title", "meta"),
    [
        ("mcp__laneway__decide", None),  # Claude Code's title for an MCP tool
        ("decide", {"claudeCode": {"toolName": "mcp__laneway__decide"}}),
        ("Decide", {"claudeCode": {"mcpServer": {"name": "laneway", "source": "config"}}}),
        ("mcp.laneway.comment", None),  # Codex
        ("laneway_comment", None),  # OpenCode
    ],
)
@pytest.mark.parametrize("mode", ["ask", "deny"])
def test_issue_41_item_4_laneways_own_tools_never_ask_a_person(
    start: Start, tmp_path: Path, title: str, meta: dict[str, object] | None, mode: str
) -> None:
    """AGENTS.md "Phase 4": a permission request for a tool of the `laneway` tool server is
    allowed at once whatever `--permissions` says; the transcript still shows the call."""
    asked: list[PermissionRequest] = []

    def person(request: PermissionRequest) -> str:
        asked.append(request)
        return "no"

    step = {"permission": {"kind": "other", "title": title, "meta": meta}}
    agent = start({"turns": [[step]]}, policy=PermissionPolicy(mode))  # type: ignore[arg-type]
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []
    assert agent.prompt("go", on_item=items.append, on_permission=person).ok
    assert asked == []
    (shown,) = [i for i in items if i.kind == "permission"]
    assert shown.data["decided_by"] == "laneway-tool"
    assert shown.data["option_id"] == "yes"
    assert title in shown.text
    assert "permission: yes" in texts(items)


def test_issue_41_item_4_another_servers_tool_of_the_same_name_still_asks(
    start: Start, tmp_path: Path
) -> None:
    """Only the `laneway` server's tools skip the person: `mcp__other__decide` is asked."""
    asked: list[PermissionRequest] = []

    def person(request: PermissionRequest) -> str:
        asked.append(request)
        return "no"

    step = {"permission": {"kind": "other", "title": "mcp__other__decide"}}
    agent = start({"turns": [[step]]}, policy=PermissionPolicy("ask"))
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []
    assert agent.prompt("go", on_item=items.append, on_permission=person).ok
    assert len(asked) == 1
    assert "permission: no" in texts(items)


@pytest.mark.parametrize(
    ("tool_call", "ours"),
    [
        ({"title": "comment (laneway MCP Server)", "kind": "other"}, True),
        ({"title": "decide (laneway MCP Server)"}, True),
        ({"title": "comment (github MCP Server)"}, False),
        ({"title": "README.md: world => gemini", "kind": "edit"}, False),
    ],
)
def test_issue_41_item_4_gemini_names_laneways_tools_by_title(
    tool_call: dict[str, str], ours: bool
) -> None:
    """Gemini CLI titles a permission request for an MCP tool `<tool> (<server> MCP Server)`
    (no `_meta`): laneway's own tools are recognised by it and allowed at once; another
    server's tool of the same name is not."""
    assert laneway_tool(tool_call) is ours


@pytest.mark.parametrize(
    ("announced", "asks"),
    [("mcp.laneway.comment", False), ("mcp.other.comment", True)],
    ids=["laneway", "another-server"],
)
def test_issue_41_item_4_a_request_naming_only_the_call_id_is_known_by_the_announced_call(
    start: Start, tmp_path: Path, announced: str, asks: bool
) -> None:
    """codex-acp asks before an MCP tool call with only the call's id and kind (its name is in
    the tool call it announced before): laneway knows its own tool by the announced call and
    allows it at once; another server's tool is still put to the person. Either way the
    request shown carries the announced title."""
    asked: list[PermissionRequest] = []

    def person(request: PermissionRequest) -> str:
        asked.append(request)
        return "no"

    steps = [
        {"tool_call": {"id": "call_7", "title": announced, "kind": "execute"}},
        {"permission": {"id": "call_7", "kind": "execute", "title": None}},
    ]
    agent = start({"turns": [steps]}, policy=PermissionPolicy("ask"))
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []
    assert agent.prompt("go", on_item=items.append, on_permission=person).ok
    assert [r.tool_call["title"] for r in asked] == ([announced] if asks else [])
    (shown,) = [i for i in items if i.kind == "permission"]
    assert shown.data["tool_call"]["title"] == announced
    assert shown.data["decided_by"] == ("person" if asks else "laneway-tool")
