"""An ordinary E2B user script (Python SDK e2b-code-interpreter, pinned in requirements.txt).

It knows nothing about Lizard: the server is chosen only by E2B's environment variables
(E2B_API_KEY + E2B_API_URL + E2B_SANDBOX_URL, or E2B_DEBUG=true). Every answer is checked with
assert; one line is printed per step. e2b.test.mjs runs it against a real `lizard serve` in both
modes and expects the same lines as from scenario.mjs.
"""

import base64
import os
import time

from e2b import (
    CommandExitException,
    InvalidArgumentException,
    NotFoundException,
    TimeoutException,
)
from e2b_code_interpreter import Sandbox

debug = os.environ.get("E2B_DEBUG", "").lower() == "true"


def step(name):
    print(f"ok {name}", flush=True)


# Older SDKs (tests/e2b/versions/) check the key's shape before any request: with LIZARD_LZ_KEY
# (the key as Lizard prints it, `lz_<hex>`; E2B_API_KEY is then its `e2b_<hex>` form) this SDK
# must refuse it without sending anything.
lz = os.environ.get("LIZARD_LZ_KEY")
if lz:
    try:
        Sandbox.create(api_key=lz, timeout=60)
        raise AssertionError("this SDK sent a key not shaped e2b_<hex>: it does not check")
    except AssertionError:
        raise
    except Exception as e:
        assert "Invalid API key format" in str(e), e
    step("format")


sbx = Sandbox.create(timeout=120)
assert sbx.sandbox_id
step("create")

# Stateful Python in the default context.
sbx.run_code("x = 41")
ex = sbx.run_code("x + 1")
assert ex.text == "42", ex
assert ex.execution_count >= 2, ex.execution_count
assert sbx.run_code("'quoted'").text == "quoted"
step("state")

# Streaming callbacks (the SDK passes the server's timestamp through).
out, errs, results = [], [], []
ex = sbx.run_code(
    'import sys\nfor i in range(3): print(i)\nprint("warn", file=sys.stderr)\ndisplay(7)\n"done"',
    on_stdout=lambda m: out.append(m.line),
    on_stderr=lambda m: errs.append(m.line),
    on_result=results.append,
)
assert "".join(out) == "0\n1\n2\n", out
assert "".join(errs) == "warn\n", errs
assert [(r.text, r.is_main_result) for r in results] == [("7", False), ("done", True)], results
assert ex.logs.stdout == out
step("streaming")

# Errors are returned, not raised.
seen = []
ex = sbx.run_code("def f():\n    return 1 / 0\nf()", on_error=seen.append)
assert ex.error.name == "ZeroDivisionError", ex.error
assert ex.error.value == "division by zero"
assert "ZeroDivisionError" in ex.error.traceback
assert seen and seen[0].name == "ZeroDivisionError"
step("error")

# Contexts.
ctx = sbx.create_code_context(language="python", cwd="/tmp")
assert ctx.language == "python" and ctx.cwd == "/tmp", ctx
sbx.run_code("y = 5", context=ctx)
assert sbx.run_code("y * 2", context=ctx).text == "10"
assert sbx.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"
assert sbx.run_code("y").error.name == "NameError"
langs = [c.language for c in sbx.list_code_contexts()]
assert "python" in langs and "javascript" in langs, langs
sbx.restart_code_context(ctx)
assert sbx.run_code("y", context=ctx).error.name == "NameError"
sbx.remove_code_context(ctx)
assert all(c.id != ctx.id for c in sbx.list_code_contexts())
step("contexts")

# JavaScript and Bash.
sbx.run_code("const a = 20", language="js")
assert sbx.run_code("a * 2 + 2", language="javascript").text == "42"
# TypeScript runs in the JavaScript kernel (types stripped), sharing its state.
assert sbx.run_code("const b: number = a + 1; b * 2", language="typescript").text == "42"
ex = sbx.run_code('echo "from bash $((6 * 7))"', language="bash")
assert "".join(ex.logs.stdout) == "from bash 42\n", ex.logs
step("languages")

# Per-run environment variables.
assert sbx.run_code("import os; os.environ.get('FOO')", envs={"FOO": "bar"}).text == "bar"
assert sbx.run_code("import os; str(os.environ.get('FOO'))").text == "None"
step("env")

# matplotlib: a PNG, and the chart behind it.
ex = sbx.run_code(
    "import matplotlib.pyplot as plt\n"
    "plt.plot([1, 2, 3], [4, 5, 6], label='l')\nplt.title('growth')\nplt.show()"
)
fig = next(r for r in ex.results if r.png)
assert base64.b64decode(fig.png)[1:4] == b"PNG"
assert fig.chart is not None and fig.chart.type.value == "line", fig.chart
assert fig.chart.title == "growth"
# Code written for older matplotlib (and E2B's kernel): boxplot(labels=...) still works.
ex = sbx.run_code(
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
    "ax.boxplot([[1, 2, 3], [4, 5, 6]], labels=['a', 'b'])\n"
    "names = [t.get_text() for t in ax.get_xticklabels()]\n"
    "plt.figure()\nplt.boxplot([[1, 2]], labels=['c'])\nplt.close('all')\nnames"
)
assert ex.error is None and ex.text == "['a', 'b']" and not ex.logs.stderr, ex
step("matplotlib")

# pandas: text, HTML and the data.
ex = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
assert ex.results[0].data == {"a": [1, 2], "b": ["x", "y"]}, ex.results[0].data
assert "<table" in ex.results[0].html
step("dataframe")

# A client-side timeout interrupts the cell; the next run works.
try:
    sbx.run_code("import time\ntime.sleep(300)", timeout=3)
    raise AssertionError("expected a timeout")
except TimeoutException:
    pass
t0 = time.monotonic()
assert sbx.run_code("1 + 1", timeout=30).text == "2"
assert time.monotonic() - t0 < 20, time.monotonic() - t0
step("timeout")

# Commands.
r = sbx.commands.run("echo hi && echo oops >&2")
assert (r.exit_code, r.stdout, r.stderr) == (0, "hi\n", "oops\n"), r
try:
    sbx.commands.run("echo failing; exit 3")
    raise AssertionError("expected CommandExitException")
except CommandExitException as e:
    assert e.exit_code == 3 and e.stdout == "failing\n", e
lines = []
sbx.commands.run("for i in 1 2 3; do echo $i; done", on_stdout=lines.append)
assert "".join(lines) == "1\n2\n3\n", lines
r = sbx.commands.run("echo $GREETING from $(pwd)", envs={"GREETING": "hello"}, cwd="/tmp")
assert r.stdout == "hello from /tmp\n", r
bg = sbx.commands.run("sleep 100", background=True)
assert any(p.pid == bg.pid for p in sbx.commands.list())
assert bg.kill() is True
assert sbx.commands.kill(999999) is False
step("commands")

# Root inside the sandbox: user="root" (cwd and HOME /root), password-less sudo, files as root.
r = sbx.commands.run("id -u && pwd && echo $HOME", user="root")
assert r.stdout == "0\n/root\n/root\n", r
assert sbx.commands.run("sudo id -u").stdout == "0\n"
sbx.files.write("/etc/e2b-root.txt", "as root", user="root")
assert sbx.files.read("/etc/e2b-root.txt") == "as root"
step("root")

# Files: text and binary round trips, list, exists, make_dir, rename, remove.
sbx.files.write("/home/user/e2b/hello.txt", "hello, lizard")
assert sbx.files.read("/home/user/e2b/hello.txt") == "hello, lizard"
blob = bytes([0, 1, 2, 250, 255])
sbx.files.write("/home/user/e2b/blob.bin", blob)
assert bytes(sbx.files.read("/home/user/e2b/blob.bin", format="bytes")) == blob
entries = sbx.files.list("/home/user/e2b")
assert sorted((e.name, e.type.value) for e in entries) == [("blob.bin", "file"), ("hello.txt", "file")]
hello = next(e for e in entries if e.name == "hello.txt")
assert hello.path == "/home/user/e2b/hello.txt" and hello.size == 13 and hello.owner == "user"
assert sbx.files.exists("/home/user/e2b/hello.txt") is True
assert sbx.files.exists("/home/user/e2b/nope.txt") is False
# A symlink's info is what it leads to, with its absolute target, as E2B's envd says.
sbx.commands.run("ln -s hello.txt /home/user/e2b/link")
link = sbx.files.get_info("/home/user/e2b/link")
assert link.type.value == "file" and link.symlink_target == "/home/user/e2b/hello.txt", link
assert sbx.files.make_dir("/home/user/e2b/sub") is True
assert sbx.files.make_dir("/home/user/e2b/sub") is False
sbx.files.rename("/home/user/e2b/hello.txt", "/home/user/e2b/sub/moved.txt")
assert sbx.files.read("/home/user/e2b/sub/moved.txt") == "hello, lizard"
assert sbx.run_code("open('/home/user/e2b/sub/moved.txt').read()").text == "hello, lizard"
watch = sbx.files.watch_dir("/home/user/e2b/sub")
sbx.files.write("/home/user/e2b/sub/watched.txt", "w")
seen = []
for _ in range(100):
    seen += [e.name for e in watch.get_new_events()]
    if "watched.txt" in seen:
        break
    time.sleep(0.1)
assert "watched.txt" in seen, seen
watch.stop()
sbx.files.write("/home/user/e2b/gz.txt", "sent compressed " * 100, gzip=True)
assert sbx.files.read("/home/user/e2b/gz.txt") == "sent compressed " * 100
sbx.files.write("/home/user/e2b/plain.txt", "not a directory")
try:
    sbx.files.watch_dir("/home/user/e2b/plain.txt")
    raise AssertionError("expected InvalidArgumentException: watching a file")
except InvalidArgumentException:
    pass
sbx.files.remove("/home/user/e2b")
assert sbx.files.exists("/home/user/e2b") is False
sbx.files.remove("/home/user/e2b")  # already gone: a no-op, as E2B's
try:
    sbx.files.read("/home/user/e2b/missing.txt")
    raise AssertionError("expected NotFoundException")
except NotFoundException:
    pass
step("files")

assert sbx.is_running() is True
if not debug:
    # Snapshots (E2B's create_snapshot / list_snapshots / delete_snapshot, and Sandbox.create
    # with the snapshot id as the template) and fork(count=2): each new sandbox starts with the
    # source's kernel state (x = 41) and files, and is independent of the source and the others.
    sbx.files.write("/home/user/snap.txt", "before the snapshot")
    snap = sbx.create_snapshot(name="e2b-py-snap")
    assert snap.snapshot_id.startswith("snap_"), snap
    assert snap.names == ["e2b-py-snap"], snap
    clone = Sandbox.create(snap.snapshot_id, timeout=60)
    assert clone.sandbox_id != sbx.sandbox_id
    assert clone.run_code("x").text == "41"
    assert clone.files.read("/home/user/snap.txt") == "before the snapshot"
    clone.run_code("x = 'changed in the clone'")
    clone.files.write("/home/user/snap.txt", "changed in the clone")
    assert sbx.run_code("x").text == "41"
    assert sbx.files.read("/home/user/snap.txt") == "before the snapshot"
    ids = [s.snapshot_id for s in sbx.list_snapshots().next_items()]
    assert ids == [snap.snapshot_id], ids
    named = Sandbox.list_snapshots(name="e2b-py-snap").next_items()
    assert [s.snapshot_id for s in named] == [snap.snapshot_id], named
    assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    assert Sandbox.delete_snapshot(snap.snapshot_id) is False
    assert Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items() == []
    try:
        Sandbox.create(snap.snapshot_id)
        raise AssertionError("expected a deleted snapshot to be refused")
    except AssertionError:
        raise
    except Exception as e:  # E2B's SDK raises its generic API error for a create's 404
        assert "not found" in str(e), e
    assert clone.run_code("x").text == "changed in the clone"
    assert clone.kill() is True
    forks = sbx.fork(count=2, timeout=60)
    assert len(forks) == 2 and all(isinstance(f, Sandbox) for f in forks), forks
    f1, f2 = forks
    assert len({f1.sandbox_id, f2.sandbox_id, sbx.sandbox_id}) == 3
    assert f1.run_code("x").text == "41" and f2.run_code("x").text == "41"
    f1.run_code("x = 1")
    f1.files.write("/home/user/snap.txt", "f1")
    assert f2.run_code("x").text == "41" and sbx.run_code("x").text == "41"
    assert f2.files.read("/home/user/snap.txt") == "before the snapshot"
    # The snapshot a multi-fork is made from is not kept.
    assert sbx.list_snapshots().next_items() == []
    assert f1.kill() is True and f2.kill() is True
    step("snapshots")

    # The control plane: info, timeout, list, pause + connect (kernel state kept), kill.
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id and info.state.value == "running", info
    sbx.set_timeout(90)
    metrics = sbx.get_metrics()
    assert len(metrics) >= 1, metrics
    for m in metrics:
        assert 0 < m.mem_used <= m.mem_total and m.disk_total > 0, m
        assert 0 <= m.cpu_used_pct <= 100 and m.cpu_count >= 1, m
    assert any(s.sandbox_id == sbx.sandbox_id for s in Sandbox.list().next_items())
    sbx.pause()
    assert Sandbox.get_info(sbx.sandbox_id).state.value == "paused"
    again = Sandbox.connect(sbx.sandbox_id)
    assert again.run_code("x").text == "41"
    assert again.kill() is True
    try:
        Sandbox.connect(sbx.sandbox_id)
        raise AssertionError("expected NotFoundException")
    except NotFoundException:
        pass
    step("lifecycle")

# ---- envd 0.6.x: file metadata (0.6.2), entries in watch events (0.6.3), allow_network_mounts
# (0.6.4). The SDK refuses these client-side below the envd version the sandbox reports. ----
msb = sbx if debug else Sandbox.create(timeout=60)
mdir = "/home/user/meta"
# Metadata keys come back lowercased (they travel as X-Metadata-<key> headers).
meta = {"author": "lizard", "purpose": "e2b compat"}
w = msb.files.write(
    f"{mdir}/a.txt", "with metadata", metadata={"Author": "lizard", "purpose": "e2b compat"}
)
assert w.metadata == meta, w
assert msb.files.get_info(f"{mdir}/a.txt").metadata == meta
msb.files.write(f"{mdir}/plain.txt", "no metadata")
listed = msb.files.list(mdir)
assert [(e.name, e.metadata) for e in listed] == [("a.txt", meta), ("plain.txt", None)], listed
# A rename keeps it; a new write replaces it (with none: none).
assert msb.files.rename(f"{mdir}/a.txt", f"{mdir}/b.txt").metadata == meta
msb.files.write(f"{mdir}/b.txt", "rewritten")
assert msb.files.get_info(f"{mdir}/b.txt").metadata is None
# As root, on a file of root's.
rw = msb.files.write("/root/meta.txt", "root", user="root", metadata={"by": "root"})
assert rw.metadata == {"by": "root"}, rw
rinfo = msb.files.get_info("/root/meta.txt", user="root")
assert (rinfo.owner, rinfo.metadata) == ("root", {"by": "root"}), rinfo
# Past envd's limit (4 KiB in all): a 400, which the SDK raises as InvalidArgumentException.
try:
    msb.files.write(f"{mdir}/big.txt", "x", metadata={"big": "v" * 5000})
    raise AssertionError("expected InvalidArgumentException: too much metadata")
except InvalidArgumentException as e:
    assert "total metadata size" in str(e), e
assert msb.files.exists(f"{mdir}/big.txt") is False
# A watch with include_entry: creates and writes carry the entry (with its metadata), removes none.
watch = msb.files.watch_dir(mdir, include_entry=True, allow_network_mounts=True)
msb.files.write(f"{mdir}/w.txt", "watched", metadata={"tag": "w"})
events = []
for _ in range(100):
    events += watch.get_new_events()
    if any(e.name == "w.txt" and e.type.value == "create" for e in events):
        break
    time.sleep(0.1)
msb.files.remove(f"{mdir}/w.txt")
for _ in range(100):
    events += watch.get_new_events()
    if any(e.name == "w.txt" and e.type.value == "remove" for e in events):
        break
    time.sleep(0.1)
watch.stop()
created = next((e for e in events if e.name == "w.txt" and e.type.value == "create"), None)
assert created is not None and created.entry is not None, events
ce = created.entry
assert (ce.name, ce.path, ce.type.value, ce.size, ce.metadata) == (
    "w.txt",
    f"{mdir}/w.txt",
    "file",
    7,
    {"tag": "w"},
), ce
removed = next((e for e in events if e.name == "w.txt" and e.type.value == "remove"), None)
assert removed is not None and removed.entry is None, events
msb.files.remove(mdir)
msb.files.remove("/root/meta.txt", user="root")
if not debug:
    assert msb.kill() is True
step("metadata")
print("done")
