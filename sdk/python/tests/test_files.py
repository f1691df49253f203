"""``sandbox.files`` on a real server: round trips, listing, directories, watching."""

from __future__ import annotations

import threading
import time

import pytest

from lizard import CodeSandbox, EntryInfo, FilesystemEvent, NotFoundError


def test_text_and_binary_round_trip(sandbox: CodeSandbox) -> None:
    info = sandbox.files.write("notes/hello.txt", "héllo\n")
    assert isinstance(info, EntryInfo)
    assert (info.path, info.name, info.type, info.size) == ("/home/user/notes/hello.txt", "hello.txt", "file", 7)
    assert sandbox.files.read("/home/user/notes/hello.txt") == "héllo\n"
    blob = bytes(range(256)) * 1000
    sandbox.files.write("/tmp/blob.bin", blob)
    assert sandbox.files.read("/tmp/blob.bin", format="bytes") == blob
    assert b"".join(sandbox.files.read("/tmp/blob.bin", format="stream")) == blob
    # The sandbox's own processes see the same files.
    assert sandbox.commands.run("cat notes/hello.txt").stdout == "héllo\n"
    many = sandbox.files.write([("a/1.txt", "one"), ("a/2.txt", b"two")])
    assert [e.name for e in many] == ["1.txt", "2.txt"]
    assert sandbox.files.read("a/2.txt") == "two"
    with pytest.raises(NotFoundError):
        sandbox.files.read("/no/such/file")


def test_list_exists_get_info(sandbox: CodeSandbox) -> None:
    sandbox.files.write("d/x.txt", "x")
    sandbox.files.write("d/sub/y.txt", "yy")
    assert [(e.name, e.type) for e in sandbox.files.list("d")] == [("sub", "dir"), ("x.txt", "file")]
    deep = [e.path for e in sandbox.files.list("/home/user/d", depth=2)]
    assert deep == ["/home/user/d/sub", "/home/user/d/sub/y.txt", "/home/user/d/x.txt"]
    assert sandbox.files.exists("d/x.txt") and not sandbox.files.exists("d/nope")
    info = sandbox.files.get_info("d/sub/y.txt")
    assert (info.size, info.type, info.owner) == (2, "file", "user")
    assert info.permissions.startswith("-rw") and info.modified_ms > 0
    assert sandbox.files.get_info("d").is_dir


def test_make_dir_remove_rename(sandbox: CodeSandbox) -> None:
    assert sandbox.files.make_dir("p/q/r") is True
    assert sandbox.files.make_dir("p/q/r") is False
    assert sandbox.files.get_info("p/q/r").type == "dir"
    sandbox.files.write("p/file.txt", "data")
    moved = sandbox.files.rename("p/file.txt", "p/q/moved.txt")
    assert moved.path == "/home/user/p/q/moved.txt"
    assert not sandbox.files.exists("p/file.txt")
    assert sandbox.files.read("p/q/moved.txt") == "data"
    sandbox.files.remove("p")
    assert not sandbox.files.exists("p")
    with pytest.raises(NotFoundError):
        sandbox.files.remove("p")


def test_watch_dir_sees_a_create(sandbox: CodeSandbox) -> None:
    sandbox.files.make_dir("w")
    events: list = []
    seen = threading.Event()

    def on_event(ev: FilesystemEvent) -> None:
        events.append(ev)
        if ev.type == "create" and ev.name == "new.txt":
            seen.set()

    handle = sandbox.files.watch_dir("w", on_event)
    try:
        sandbox.files.write("w/new.txt", "hi")
        assert seen.wait(10), events
    finally:
        t0 = time.monotonic()
        handle.stop()
        assert time.monotonic() - t0 < 5
    ev = next(e for e in events if e.type == "create" and e.name == "new.txt")
    assert ev.path == "/home/user/w/new.txt" and ev.is_dir is False
    assert handle.error is None
