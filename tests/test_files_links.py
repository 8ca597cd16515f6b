"""Files connector: hard links and a symlink swapped in while files are read."""

from __future__ import annotations

import os
import threading
import time

import pytest

from harness_magic.core.execution.connectors import files_connector
from harness_magic.core.confinement.safe_open import LinkRefused, open_beneath, openat2_available
from harness_magic.core.execution.tools import ToolError

SECRET = "password\nhunter2\n"
SAFE = "a,b\n1,x\n"
RACE_READS = 400
"""Reads attempted at least while another thread swaps the file for a link."""
RACE_MAX_ATTEMPTS = 50_000
"""Opens tried at most until the race has shown what the test needs (the control winning, a refusal)."""
LINK_HOLD_S = 0.0005
"""How long the swapper leaves the link in place, so a loaded machine's scheduler cannot hide the window."""


@pytest.fixture
def root(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "plain.csv").write_text(SAFE)
    (tmp_path / "secret.csv").write_text(SECRET)
    return data


def tool(connector, name):
    return next(t for t in connector.tools if t.name == f"files__{name}").handler


def test_a_hard_link_to_a_file_outside_the_root_is_refused(root):
    os.link(root.parent / "secret.csv", root / "innocent.csv")
    connector = files_connector([root])
    with pytest.raises(ToolError, match="hard-linked") as refused:
        tool(connector, "read")(path="data/innocent.csv")
    assert "hunter2" not in str(refused.value)
    assert "innocent.csv" not in str(tool(connector, "list")())


def test_a_root_configured_for_hard_links_reads_them(root):
    os.link(root / "plain.csv", root / "twin.csv")
    connector = files_connector({"data": root}, allow_hardlinks=["data"])
    result = tool(connector, "read")(path="data/twin.csv")
    assert list(result.value["a"]) == [1]
    with pytest.raises(ValueError, match="unknown roots"):
        files_connector({"data": root}, allow_hardlinks=["elsewhere"])


@pytest.mark.parametrize("link_target", ["../secret.csv", "plain.csv", "/etc/passwd"])
def test_every_symlink_is_refused_even_inside_the_root(root, link_target):
    os.symlink(link_target, root / "link.csv")
    with pytest.raises(ToolError, match="symbolic link"):
        tool(files_connector([root]), "read")(path="data/link.csv")


def test_a_symlinked_directory_is_refused(root):
    os.symlink(root.parent, root / "up")
    connector = files_connector([root])
    with pytest.raises(ToolError, match="symbolic link"):
        tool(connector, "read")(path="data/up/secret.csv")
    with pytest.raises(ToolError, match="symbolic link"):
        tool(connector, "list")(directory="data/up")


METHODS = ["nofollow"] + (["openat2"] if openat2_available() else [])


def swapper(root, what, stop):
    """Swap ``sub/target.csv`` (``what="file"``) or ``sub`` (``"directory"``) for a link to the outside."""
    outside = root.parent
    sub, staging = root / "sub", root / "sub_staging"

    def steps():
        if what == "file":
            tmp_link, tmp_file = sub / "tmp_link", sub / "tmp_file"
            yield lambda: os.symlink(outside / "target.csv", tmp_link)
            yield lambda: os.replace(tmp_link, sub / "target.csv")
            yield lambda: time.sleep(LINK_HOLD_S)
            yield lambda: tmp_file.write_text(SAFE)
            yield lambda: os.replace(tmp_file, sub / "target.csv")
        else:
            yield lambda: os.rename(sub, staging)
            yield lambda: os.symlink(outside, sub)
            yield lambda: time.sleep(LINK_HOLD_S)
            yield lambda: os.unlink(sub)
            yield lambda: os.rename(staging, sub)

    def run():
        while not stop.is_set():
            for step in steps():
                try:
                    step()
                except OSError:
                    pass

    return threading.Thread(target=run, daemon=True)


def race(root, what, opener, until):
    """Open ``sub/target.csv`` during the swap until ``until(seen, refused)`` (at least RACE_READS times)."""
    (root / "sub" / "target.csv").write_text(SAFE)
    (root.parent / "target.csv").write_text(SECRET)
    stop = threading.Event()
    thread = swapper(root, what, stop)
    thread.start()
    seen, refused = [], 0
    try:
        for attempt in range(RACE_MAX_ATTEMPTS):
            if attempt >= RACE_READS and until(seen, refused):
                break
            try:
                fd = opener()
            except (LinkRefused, FileNotFoundError, NotADirectoryError):
                refused += 1
                continue
            with os.fdopen(fd) as handle:
                seen.append(handle.read())
    finally:
        stop.set()
        thread.join()
    return seen, refused


@pytest.mark.parametrize("what", ["file", "directory"])
def test_the_swap_race_is_winnable_against_a_naive_open(root, what):
    """The control: following links, the same race reaches the secret."""
    seen, _ = race(root, what, lambda: os.open(root / "sub" / "target.csv", os.O_RDONLY),
                   until=lambda seen, refused: SECRET in seen)
    assert SECRET in seen


@pytest.mark.parametrize("what", ["file", "directory"])
@pytest.mark.parametrize("method", METHODS)
def test_a_racing_symlink_swap_never_reaches_outside(root, method, what):
    seen, refused = race(root, what, lambda: open_beneath(str(root), "sub/target.csv", method=method),
                         until=lambda seen, refused: refused > 0)
    assert SECRET not in seen
    assert set(seen) <= {SAFE} and refused > 0


def test_the_tool_reads_through_the_safe_descriptor(root):
    result = tool(files_connector([root]), "read")(path="data/plain.csv")
    assert result.value.to_dict("list") == {"a": [1], "b": ["x"]}
