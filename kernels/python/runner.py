"""Lizard's Python kernel runner: one IPython shell per process, driven by the runner protocol.

What it does (the contract is kernels/PROTOCOL.md):
  * reads `exec` control lines (JSON) from fd $LIZARD_CONTROL_FD and runs each cell with
    `InteractiveShell.run_cell(code, store_history=True)`, so magics, `!cmd`, `_`/`Out`, top-level
    `await` etc. behave as in IPython/Jupyter;
  * writes events (JSON Lines) to fd $LIZARD_EVENT_FD: `ready`; `result` (the last expression's
    value, `main: true`, via a DisplayHook subclass; `display()` calls and inline matplotlib
    figures, `main: false`, via a DisplayPublisher subclass); at most one `error` (via
    `_showtraceback`, colourless); exactly one `done` per `exec`;
  * leaves user output on the real fds 1 and 2 (sys.stdout/sys.stderr are write-through UTF-8
    wrappers whose error handler never raises), flushing both before every event line;
  * applies the per-run `env`, restoring os.environ afterwards;
  * runs `!cmd`/%system through the shell on the kernel's own fds 1 and 2 (no pty);
  * makes `exit()`/`quit()` raise SystemExit like `sys.exit()`: the cell stops with an error, the
    process and its state stay (only `os._exit` ends the kernel);
  * turns SIGINT during a cell into KeyboardInterrupt in user code (`done{status:"interrupted"}`),
    ignores it while idle, and never lets it tear an event line or skip a `done`;
  * exits when the control fd reaches end-of-file.

What it does not do: no Jupyter messaging/ZMQ, no stdin (fd 0 is /dev/null: `input()` gets
EOFError), no `clear_output`/`update_display` semantics (updates are sent as new results), no GUI
event loops, no IPython startup or config files, no history file (history is an in-memory SQLite
database).
"""

import os
import signal
import sys

# --- SIGINT first: an interrupt that arrives during start-up must not kill the process. ----------


class _State:
    """Process-wide runner state (touched by the SIGINT handler, so kept tiny and flat)."""

    in_cell = False  # a cell is running: SIGINT becomes KeyboardInterrupt
    pending = False  # SIGINT arrived while the runner's own code ran; raise it at a safe point
    run = None  # the _Run being executed, or None while idle
    formatting = 0  # > 0 while the main thread formats a value (its tracebacks are warnings)
    async_cancelled = False  # the running async cell was cancelled to deliver a SIGINT
    redelivering = False  # a _redeliver thread is pending
    critical = 0  # > 0 while IPython formats a traceback: a SIGINT then is deferred like above
    cell_error = True  # the traceback being shown is the cell's own failure (see showtraceback)
    showing = 0  # nesting of showtraceback (which calls showsyntaxerror for SyntaxErrors)


_S = _State()


def _on_sigint(signum, frame):
    # Idle (waiting on the control fd, or between runs): ignore. PEP 475 restarts the read.
    if not _S.in_cell:
        return
    # The cell was already stopped by an interrupt (its KeyboardInterrupt error is out): further
    # SIGINTs (a double click on "interrupt") must not hit IPython's bookkeeping after the cell.
    run = _S.run
    if run is not None and run.error_name == "KeyboardInterrupt":
        return
    # The runner's own code (writing an event, a chunk of output, bookkeeping around run_cell) is
    # never interrupted mid-way: remember the interrupt and raise it at the next safe point
    # (_check_pending), or re-deliver it shortly. Everything else (user code, IPython, libraries)
    # gets KeyboardInterrupt right away.
    if _S.critical or (frame is not None and frame.f_code.co_filename == _RUNNER_FILE):
        _defer_interrupt()
        return
    raise KeyboardInterrupt


def _defer_interrupt():
    _S.pending = True
    if not _S.redelivering:
        _S.redelivering = True
        _thread.start_new_thread(_redeliver, (_S.run,))


def _redeliver(run):
    """Backstop for a deferred SIGINT that no _check_pending picked up: send it again to the main
    thread (which also wakes it from a blocking call) once the runner code is likely done."""
    try:
        time.sleep(0.02)
        if _S.pending and _S.in_cell and _S.run is run:
            _S.pending = False
            signal.pthread_kill(_MAIN_THREAD, signal.SIGINT)
    except Exception:
        pass
    finally:
        _S.redelivering = False


import _thread  # noqa: E402
import time  # noqa: E402

_RUNNER_FILE = _on_sigint.__code__.co_filename
_MAIN_THREAD = _thread.get_ident()
signal.signal(signal.SIGINT, _on_sigint)


def _unraisable_hook(unraisable):
    # A SIGINT that lands in a finalizer or weakref callback is swallowed by Python ("Exception
    # ignored in ..."): deliver it again instead, so the cell still stops.
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _S.in_cell:
        _defer_interrupt()
        return
    sys.__unraisablehook__(unraisable)


sys.unraisablehook = _unraisable_hook

import builtins  # noqa: E402
import codecs  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402


def _check_pending():
    """Raise a SIGINT that was deferred while runner code ran (main thread, inside a cell only)."""
    if _S.pending and _S.in_cell and not _S.critical and _thread.get_ident() == _MAIN_THREAD:
        _S.pending = False
        raise KeyboardInterrupt


# --- File descriptors ----------------------------------------------------------------------------


def _take_fd(var, default):
    value = os.environ.pop(var, None)  # user code and subprocesses do not need to see these
    fd = int(value) if value else default
    os.set_inheritable(fd, False)  # `!cmd`, subprocess, os.system never hold them
    return fd


# A zygote (kernels/PROTOCOL.md, "The zygotes") is started with only its fork socket; the
# kernels it forks get their event and control fds at 3 and 4. Until then /dev/null holds those
# numbers, so nothing the imports open can land there and be clobbered in a child.
_ZYGOTE_FD = os.environ.pop("LIZARD_ZYGOTE_FD", None)
# A host zygote (docs/design/shared-zygote.md): its socket is the server's, and its forks join
# sandboxes before they serve their agents as zygotes.
_HOST_ZYGOTE = os.environ.pop("LIZARD_HOST_ZYGOTE", None) == "1"
if _ZYGOTE_FD is not None:
    _ZYGOTE_FD = int(_ZYGOTE_FD)
    if _ZYGOTE_FD in (3, 4):
        import fcntl

        _fd = fcntl.fcntl(_ZYGOTE_FD, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(_ZYGOTE_FD)
        _ZYGOTE_FD = _fd
    os.set_inheritable(_ZYGOTE_FD, False)
    for _n in (3, 4):
        _fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        if _fd != _n:
            os.dup2(_fd, _n, inheritable=False)
            os.close(_fd)
    _EVENT_FD, _CONTROL_FD = 3, 4
else:
    _EVENT_FD = _take_fd("LIZARD_EVENT_FD", 3)
    _CONTROL_FD = _take_fd("LIZARD_CONTROL_FD", 4)


def _write_all(fd, data):
    """Write all of `data` to `fd`: retries short writes, and waits if someone (for example a Node
    subprocess sharing the pipe) switched the file description to non-blocking mode."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    total = len(view)
    done = 0
    while done < total:
        try:
            done += os.write(fd, view[done:])
        except BlockingIOError:
            import select

            select.select([], [fd], [], 1.0)


class _FdWriter(io.RawIOBase):
    """Raw binary writer behind `sys.stdout`/`sys.stderr` (`sys.stdout.buffer`): every write becomes
    a `stdout`/`stderr` event on the event fd at once, so Python-level output is ordered exactly with
    results and errors (PROTOCOL.md, "Ordering rule"). Bytes that are not UTF-8 become U+FFFD.
    `fileno()` is still the real fd 1/2, which subprocesses and C code write to directly."""

    def __init__(self, fd, name):
        super().__init__()
        self._fd = fd
        self.name = name
        self._kind = "stdout" if fd == 1 else "stderr"
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def flush_decoder(self):
        """Emit a character left incomplete at the end of the last write (as U+FFFD)."""
        text = self._decoder.decode(b"", final=True)
        if text:
            _emit_output(self._kind, text)

    def fileno(self):
        return self._fd

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, b):
        view = memoryview(b)
        n = view.nbytes
        if n:
            text = self._decoder.decode(view)
            if text:
                _emit_output(self._kind, text)
        _check_pending()  # a SIGINT that landed while we were blocked writing
        return n


def _stdio_errors(exc):
    """Encoding error handler of sys.stdout/sys.stderr: never raises. Surrogate-escaped bytes
    (from undecodable file names etc.) are written back as the original bytes, like
    'surrogateescape'; any other unencodable character (a lone surrogate) becomes a \\uXXXX escape,
    like 'backslashreplace'."""
    if isinstance(exc, UnicodeEncodeError):
        out = bytearray()
        for ch in exc.object[exc.start : exc.end]:
            o = ord(ch)
            if 0xDC80 <= o <= 0xDCFF:
                out.append(o - 0xDC00)
            else:
                out += ("\\u%04x" % o if o <= 0xFFFF else "\\U%08x" % o).encode("ascii")
        return bytes(out), exc.end
    if isinstance(exc, UnicodeDecodeError):
        return "\ufffd", exc.end
    raise exc


codecs.register_error("lizard.stdio", _stdio_errors)


def _make_stream(fd, name):
    stream = io.TextIOWrapper(
        _FdWriter(fd, name),
        encoding="utf-8",
        errors="lizard.stdio",
        newline="\n",
        # Line-buffered like a terminal: `print` is one event; a write holding "\n" or "\r" (progress
        # bars) is sent at once; a partial line goes out at the next newline, event, or cell end.
        line_buffering=True,
        write_through=False,
    )
    stream.mode = "w"
    return stream


# The interpreter's own stdout/stderr objects close fds 1/2 when garbage-collected: keep them.
_ORIGINAL_STDIO = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
for _s in (sys.stdout, sys.stderr):
    try:
        _s.flush()
    except Exception:
        pass
sys.stdout = sys.__stdout__ = _make_stream(1, "<stdout>")
sys.stderr = sys.__stderr__ = _make_stream(2, "<stderr>")


def _flush_stdio():
    """Ordering rule: everything the cell printed so far is sent before the next event line."""
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


def _flush_decoders():
    for s in (sys.stdout, sys.stderr):
        raw = getattr(s, "buffer", None)
        if isinstance(raw, _FdWriter):
            raw.flush_decoder()


# --- Environment the user code sees --------------------------------------------------------------

# Inline matplotlib: the backend module is imported by matplotlib itself on first use (nothing
# matplotlib is imported here: start-up stays fast). Set unconditionally: inline figures are the
# product's behaviour, whatever MPLBACKEND the agent's own environment may carry.
def _set_user_environment():
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    os.environ.setdefault("PAGER", "cat")
    os.environ.setdefault("GIT_PAGER", "cat")


_set_user_environment()


class _BoxplotLabels:
    """`boxplot(labels=...)`, the spelling matplotlib removed in 3.11 (for `tick_labels`) and that
    code written for E2B's and older kernels still uses: both spellings work. Installed as an import
    hook, so matplotlib is patched when user code imports it (never imported here); a matplotlib
    that still takes `labels` is left as it is."""

    MODULES = ("matplotlib.axes._axes", "matplotlib.pyplot")

    def find_spec(self, name, path=None, target=None):
        if name not in self.MODULES:
            return None
        import importlib.util

        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        loader = spec.loader
        real_exec = loader.exec_module

        def exec_module(module, _real=real_exec, _patch=self.patch):
            _real(module)
            _patch(module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            return None
        return spec

    @staticmethod
    def patch(module):
        import functools
        import inspect

        owner = getattr(module, "Axes", None) if module.__name__.endswith("_axes") else module
        fn = getattr(owner, "boxplot", None)
        if fn is None:
            return
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return
        if "labels" in params or "tick_labels" not in params:
            return

        @functools.wraps(fn)
        def boxplot(*args, labels=None, **kwargs):
            if labels is not None and kwargs.get("tick_labels") is None:
                kwargs["tick_labels"] = labels
            return fn(*args, **kwargs)

        setattr(owner, "boxplot", boxplot)


sys.meta_path.insert(0, _BoxplotLabels())

# `python runner.py` puts the runner's directory first on sys.path; a kernel imports from its
# working directory instead, as Jupyter does.
if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == os.path.dirname(
    os.path.abspath(_RUNNER_FILE)
):
    sys.path[0] = ""
elif "" not in sys.path:
    sys.path.insert(0, "")


# --- Events --------------------------------------------------------------------------------------

_ANSI_RE = None


def _strip_ansi(text):
    global _ANSI_RE
    if _ANSI_RE is None:
        import re

        # CSI sequences (colours, cursor moves), OSC sequences (titles, links), 2-byte escapes.
        _ANSI_RE = re.compile(
            r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])"
        )
    return _ANSI_RE.sub("", text)


def _safe_str(obj):
    try:
        return str(obj)
    except BaseException:
        pass
    try:
        return repr(obj)
    except BaseException:
        return "<unprintable %s object>" % type(obj).__name__


def _b64(data):
    import base64

    return base64.b64encode(bytes(data)).decode("ascii")


def _jsonable(obj, _path=None):
    """A JSON-serialisable copy of `obj`: NaN/inf become null, bytes base64, keys strings, unknown
    objects their str(); cycles are cut."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return _b64(obj)
    if _path is None:
        _path = set()
    if id(obj) in _path or len(_path) > 200:
        return "<recursion>"
    _path.add(id(obj))
    try:
        if isinstance(obj, dict):
            return {
                (k if isinstance(k, str) else _safe_str(k)): _jsonable(v, _path)
                for k, v in list(obj.items())
            }
        if isinstance(obj, (list, tuple, set, frozenset)):
            return [_jsonable(v, _path) for v in list(obj)]
        for conv in ("tolist", "isoformat"):  # numpy arrays/scalars; datetime and friends
            f = getattr(type(obj), conv, None)
            if f is not None:
                try:
                    return _jsonable(f(obj), _path)
                except Exception:
                    pass
        return _safe_str(obj)
    finally:
        _path.discard(id(obj))


def _is_json_mime(mime):
    return mime == "application/json" or mime.endswith("+json")


def _mime_bundle(data):
    """Normalise a format dict: text as str, binary (bytes) as base64, JSON types as JSON."""
    out = {}
    if not isinstance(data, dict):
        return out
    for mime, value in list(data.items()):
        mime = mime if isinstance(mime, str) else _safe_str(mime)
        if _is_json_mime(mime):
            if isinstance(value, (bytes, bytearray)):
                try:
                    value = json.loads(bytes(value))
                except Exception:
                    value = bytes(value).decode("utf-8", "replace")
            out[mime] = _jsonable(value)
        elif isinstance(value, str):
            out[mime] = value  # already text, or base64 (IPython's Image, matplotlib figures)
        elif isinstance(value, (bytes, bytearray, memoryview)):
            if mime.startswith("text/") or mime.endswith("+xml"):
                out[mime] = bytes(value).decode("utf-8", "replace")
            else:
                out[mime] = _b64(value)  # image/png, image/jpeg, application/pdf, ...
        else:
            out[mime] = _jsonable(value)
    return out


def _encode_line(obj):
    try:
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except Exception:
        try:
            text = json.dumps(
                _jsonable(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":")
            )
        except Exception as e:  # unreachable in practice; never crash the runner over one event
            text = json.dumps(
                {"ev": "protocol_error", "message": "unserialisable event: %s" % _safe_str(e)}
            )
    text += "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be UTF-8: pair what pairs, replace the rest with U+FFFD.
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


_EVENT_LOCK = _thread.allocate_lock()
# An event line written only with the next one (`_emit(..., hold=True)`).
_HELD_LINE = b""


def _write_event(line, hold=False):
    """Under `_EVENT_LOCK`: write `line` after the held one, or hold both for the next write."""
    global _HELD_LINE
    line, _HELD_LINE = _HELD_LINE + line, b""
    if hold:
        _HELD_LINE = line
        return
    try:
        _write_all(_EVENT_FD, line)
    except OSError:
        # The agent is gone (or user code closed the fd): nothing left to talk to.
        os._exit(1)


def _emit_output(kind, text):
    """One `stdout`/`stderr` event (no stdio flush: this is what flushing calls)."""
    line = _encode_line({"ev": kind, "text": text})
    with _EVENT_LOCK:
        _write_event(line)


def _emit(obj, interruptible=True, hold=False):
    """Write one event line on the event fd (whole, even if SIGINT arrives meanwhile). With
    `hold`, it goes out with the next event instead (in order): the main result, which the run's
    `done` follows within microseconds, so that the agent is woken once for both."""
    _flush_stdio()
    line = _encode_line(obj)
    with _EVENT_LOCK:
        _write_event(line, hold)
    if interruptible:
        _check_pending()


class _Run:
    """One `exec`: its id and what has been sent for it."""

    __slots__ = ("id", "main_sent", "error_name")

    def __init__(self, run_id):
        self.id = run_id
        self.main_sent = False
        self.error_name = None


def _emit_result(data, metadata, main):
    run = _S.run
    if run is None:
        return  # display() from a background thread while idle: the agent drops idle output too
    if main:
        if run.main_sent:
            main = False  # at most one main result per run (e.g. exec(..., 'single') in a cell)
        else:
            run.main_sent = True
    bundle = _mime_bundle(data)
    if not bundle:
        return
    md = _jsonable(metadata) if isinstance(metadata, dict) else {}
    _emit({"ev": "result", "id": run.id, "main": main, "data": bundle, "metadata": md}, hold=main)


def _traceback_lines(stb):
    if isinstance(stb, str):
        stb = [stb]
    text = "\n".join(_safe_str(chunk).rstrip("\n") for chunk in (stb or ()))
    return _strip_ansi(text).splitlines()


def _emit_error(name, value, lines):
    """The run's error event (at most one per run); a later traceback in the same run, or one
    outside any run, goes to stderr as text so nothing is lost."""
    run = _S.run
    if run is None or run.error_name is not None:
        try:
            sys.stderr.write("\n".join(lines) + "\n")
        except Exception:
            pass
        return
    run.error_name = name
    _S.pending = False  # an interrupt deferred while the error was being shown: the cell is failing
    _emit(
        {"ev": "error", "id": run.id, "name": name, "value": value, "traceback": lines},
        interruptible=False,  # the cell is failing anyway; never raise inside traceback display
    )


def _trim_runner_frames(exc):
    """Cut the runner's own frames (the SIGINT handler, _check_pending and its callers) off the end
    of a KeyboardInterrupt's traceback: the user should see where *their* code was interrupted."""
    if not isinstance(exc, KeyboardInterrupt):
        return
    entries = []
    tb = exc.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    cut = len(entries)
    while cut > 0 and entries[cut - 1].tb_frame.f_code.co_filename == _RUNNER_FILE:
        cut -= 1
    if 0 < cut < len(entries):
        entries[cut - 1].tb_next = None


def _error_name(etype):
    name = getattr(etype, "__name__", None) or _safe_str(etype)
    if _S.async_cancelled and name == "CancelledError":
        return "KeyboardInterrupt"  # our SIGINT delivery into an async cell (see _AsyncRunner)
    if name.startswith("_") and getattr(etype, "__module__", None) == "builtins":
        # A private built-in subclass is named by its public base: Python 3.13+ raises
        # `_IncompleteInputError` (a SyntaxError) for incomplete input such as `f(`.
        for base in getattr(etype, "__mro__", ())[1:]:
            if not base.__name__.startswith("_"):
                return base.__name__
    return name


# --- IPython -------------------------------------------------------------------------------------

from contextlib import contextmanager  # noqa: E402

from IPython.core.autocall import ExitAutocall  # noqa: E402
from IPython.core.displayhook import DisplayHook  # noqa: E402
from IPython.core.displaypub import DisplayPublisher  # noqa: E402
from IPython.core import formatters as _formatters  # noqa: E402
from IPython.core.formatters import DisplayFormatter  # noqa: E402
from IPython.core.history import HistoryOutput  # noqa: E402
from IPython.core.inputtransformer2 import TransformerManager  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from traitlets import Type, default  # noqa: E402
from traitlets.config import Config  # noqa: E402


class LizardDisplayHook(DisplayHook):
    """The last expression's value: one `result` event with `main: true` and the full MIME bundle
    (instead of `Out[n]: ...` on stdout). `_`, `Out`, `_n` and the `;` suppression are IPython's."""

    def start_displayhook(self):
        super().start_displayhook()
        self._bundle = None

    @staticmethod
    def semicolon_at_end_of_expression(expression):
        # Only a cell with a `;` can end in one; IPython tokenizes the whole cell to find out.
        if ";" not in expression:
            return False
        return DisplayHook.semicolon_at_end_of_expression(expression)

    def write_output_prompt(self):
        pass

    def write_format_data(self, format_dict, md_dict=None):
        self._bundle = (format_dict, md_dict)

    def finish_displayhook(self):
        self._is_active = False
        bundle, self._bundle = getattr(self, "_bundle", None), None
        if bundle is not None:
            _emit_result(bundle[0], bundle[1], main=True)


class LizardDisplayPublisher(DisplayPublisher):
    """`display(...)` (and inline matplotlib figures): a `result` event with `main: false`, sent at
    the moment of the call so it lands between the prints around it."""

    def publish(self, data, metadata=None, *args, transient=None, update=False, **kwargs):
        # `update=True` (DisplayHandle.update / update_display) cannot replace an earlier result in
        # this protocol: it is sent as a new result rather than dropped.
        try:  # IPython's own bookkeeping (used by %notebook), as the base class does.
            self.shell.history_manager.outputs[self.shell.execution_count - 1].append(
                HistoryOutput(output_type="display_data", bundle=data)
            )
        except Exception:
            pass
        _emit_result(data, metadata, main=False)

    def clear_output(self, wait=False):
        # Deliberately ignored: results already sent cannot be retracted in this protocol (and the
        # base class would print terminal escape codes on stdout).
        pass


# Exact types no formatter but text/plain shows unless one was given a printer for them.
_PLAIN_TYPES = frozenset({int, float, complex, bool, str})
# Formatters whose output for an object of those types comes only from their registries or their
# `print_method` (IPython's own, but text/plain's); `_register_data_formatters` adds Lizard's two,
# which answer only DataFrames and Figures.
_QUIET_FORMATTERS = {
    getattr(_formatters, name)
    for name in (
        "HTMLFormatter", "MarkdownFormatter", "SVGFormatter", "PNGFormatter", "PDFFormatter",
        "JPEGFormatter", "LatexFormatter", "JSONFormatter", "JavascriptFormatter",
        "IPythonDisplayFormatter", "MimeBundleFormatter",
    )
}


class LizardFormatter(DisplayFormatter):
    """Counts nesting so a traceback from a broken `_repr_*_` is shown as a warning (stderr), not
    as the run's error: IPython itself treats it as non-fatal and still shows text/plain.

    A plain int, float, complex, bool or str (a cell ending in `1+1`) is formatted by text/plain
    alone when no other formatter can show it (`_plain_only`): asking each of the eleven others
    was a third of a trivial cell's time. The result is what IPython's loop returns."""

    def format(self, obj, include=None, exclude=None):
        if _thread.get_ident() != _MAIN_THREAD:
            return super().format(obj, include, exclude)
        _S.formatting += 1
        try:
            if type(obj) in _PLAIN_TYPES and not include and not exclude:
                done = self._plain_only(obj)
                if done is not None:
                    return done
            return super().format(obj, include, exclude)
        finally:
            _S.formatting -= 1

    def _plain_only(self, obj):
        """`format(obj)` when every formatter but text/plain is one of `_QUIET_FORMATTERS` with
        no printer for `obj` (by its id, its type or a base of it, or any deferred one) and no
        `print_method` on it; else None (IPython's own loop then)."""
        mro = type(obj).__mro__
        plain_key = None
        for key, f in [(None, self.ipython_display_formatter), (None, self.mimebundle_formatter)] + list(
            self.formatters.items()
        ):
            cls = type(f)
            if cls is _formatters.PlainTextFormatter and key is not None and plain_key is None:
                plain_key = key
                continue
            if cls not in _QUIET_FORMATTERS:
                return None
            if getattr(cls, "_answers_only_its_types", False):
                continue
            # traitlets' own store of the values (each public attribute read goes through a
            # descriptor); a value not there yet is read once the public way, which stores it.
            tv = f.__dict__.get("_trait_values")
            if tv is None:
                return None
            values = [
                tv[name] if name in tv else getattr(f, name)
                for name in ("enabled", "type_printers", "deferred_printers", "singleton_printers", "print_method")
            ]
            enabled, types, deferred, singletons, print_method = values
            if not enabled:
                continue
            if deferred or id(obj) in singletons or not types.keys().isdisjoint(mro) or hasattr(obj, print_method):
                return None
        if plain_key is None:
            return None
        data = self.formatters[plain_key](obj)
        md = None
        if isinstance(data, tuple) and len(data) == 2:
            data, md = data
        return ({} if data is None else {plain_key: data}), ({} if md is None else {plain_key: md})


# What IPython's static transforms (`TransformerManager`) could change in a cell: a magic, a shell
# escape or a help request (`%`, `!`, `?`), a prompt to strip (`>>>`, `...`, `In [`), a line
# starting with an escape (`,`, `;`, `/`), leading whitespace (empty lines, indentation), a line of
# whitespace only (`dedent` empties it), or a line break other than `\n` (where `str.splitlines`
# or the tokenizer would see a line start this pattern does not).
_STATIC_TRANSFORM_HINTS = re.compile(
    r"[%!?]|>>>|\.\.\.|In \[|^[ \t]*[,;/]|\A\s|^[^\S\n]+$|[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]",
    re.M,
)


class LizardTransformerManager(TransformerManager):
    """IPython's static input transforms, skipped for a cell that none of them can change (see
    `_STATIC_TRANSFORM_HINTS`; most cells): they tokenize the whole cell to look, which was a
    quarter of a trivial cell's time. Any other cell, or any change to the transform lists (an
    extension adding its own), takes IPython's own path. The dynamic transforms (automagic,
    autocall: `InteractiveShell.transform_cell`) run as before."""

    def __init__(self):
        super().__init__()
        self._defaults = self._lists()

    def _lists(self):
        return (list(self.cleanup_transforms), list(self.line_transforms), list(self.token_transformers))

    def transform_cell(self, cell):
        if (
            cell
            and _STATIC_TRANSFORM_HINTS.search(cell) is None
            and self._lists() == self._defaults
        ):
            return cell if cell.endswith("\n") else cell + "\n"
        return super().transform_cell(cell)


class LizardExit(ExitAutocall):
    """`exit`, `exit()`, `quit()`, `exit(1)`: raise SystemExit, which stops the cell and is reported
    as an error (`SystemExit`), exactly like `sys.exit()` in IPython. The kernel process and its
    state survive: ending the context is the agent's job, and silently doing nothing (plain
    InteractiveShell's behaviour) would let the rest of the cell run."""

    def __call__(self, *args):
        raise SystemExit(*args)

    def __repr__(self):
        return "Use exit() to stop the cell here (raises SystemExit; the kernel keeps running)."


class _AsyncRunner:
    """IPython's asyncio loop runner for cells with top-level `await`, made interruptible: a SIGINT
    that lands in the event loop (not in the cell's code) cancels the cell's task, so the cell stops
    at its current `await` and no half-run cell is left behind to resume during a later cell."""

    def __call__(self, coro):
        from IPython.core.async_helpers import get_asyncio_loop

        loop = get_asyncio_loop()
        task = loop.create_task(coro)
        while True:
            try:
                return loop.run_until_complete(task)
            except KeyboardInterrupt:
                if task.done():
                    raise
                _S.async_cancelled = True
                task.cancel()

    def __str__(self):
        return "asyncio"


class LizardShell(InteractiveShell):
    displayhook_class = Type(LizardDisplayHook)
    display_pub_class = Type(LizardDisplayPublisher)

    @default("exiter")
    def _exiter_default(self):
        return LizardExit(self)

    def init_display_formatter(self):
        self.display_formatter = LizardFormatter(parent=self)
        self.configurables.append(self.display_formatter)

    def init_virtualenv(self):
        # The kernel's interpreter is the kernel environment's venv; never graft a $VIRTUAL_ENV
        # inherited from the agent's environment onto sys.path.
        pass

    @contextmanager
    def _tee(self, channel):
        # IPython 9 copies every write on stdout/stderr into history_manager.outputs, forever:
        # a 10 MB print would stay in memory for the life of the context. Output is streamed to
        # the agent instead; only rich results are kept (for %notebook), as in the base class.
        yield

    def ask_exit(self):
        raise SystemExit()

    def enable_gui(self, gui=None):
        # `%matplotlib inline` (and `%matplotlib` with the inline default) needs no event loop.
        # There is no display for GUI toolkits: say so instead of IPython's NotImplementedError.
        if gui not in (None, "inline"):
            from IPython.core.error import UsageError

            raise UsageError(
                "GUI event loop %r is not available in this kernel: use %%matplotlib inline" % gui
            )

    def system(self, cmd):
        """`!cmd` / %system / %pip: run through the shell with the kernel's own fds 1 and 2, so the
        output streams like a C extension's (no pty, no \\r\\n, stdout and stderr kept apart).
        SIGINT kills the command and interrupts the cell (KeyboardInterrupt), rather than being
        swallowed as IPython's system_raw does."""
        cmd = self.var_expand(cmd, depth=1)
        _flush_stdio()
        import subprocess

        try:
            ec = subprocess.call(cmd, shell=True, executable=os.environ.get("SHELL") or None)
        except KeyboardInterrupt:
            self.user_ns["_exit_code"] = -signal.SIGINT
            raise
        if ec > 128:
            ec = -(ec - 128)
        self.user_ns["_exit_code"] = ec
        if self.system_raise_on_error and ec != 0:
            raise subprocess.CalledProcessError(ec, cmd)

    system_raw = system
    system_piped = system

    def showtraceback(
        self,
        exc_tuple=None,
        filename=None,
        tb_offset=None,
        exception_only=False,
        running_compiled_code=False,
    ):
        # IPython prints exception groups with traceback.print_exc (to stderr) instead of calling
        # _showtraceback: route them to the event as well.
        try:
            etype, value, tb = self._get_exc_info(exc_tuple)
        except ValueError:
            etype = value = None
        _trim_runner_frames(value)
        # A second SIGINT while the traceback is being formatted would make IPython print a bare
        # "KeyboardInterrupt" on stderr instead of the error: defer it (the cell is failing anyway;
        # if the user code goes on, _redeliver interrupts it).
        _S.critical += 1
        outer, _S.cell_error = _S.cell_error, _called_by_machinery(sys._getframe(1))
        _S.showing += 1
        try:
            self._showtraceback_impl(
                etype, value, tb, exc_tuple, filename, tb_offset, exception_only,
                running_compiled_code,
            )
        finally:
            _S.showing -= 1
            _S.cell_error = outer
            _S.critical -= 1

    def _showtraceback_impl(
        self, etype, value, tb, exc_tuple, filename, tb_offset, exception_only,
        running_compiled_code,
    ):
        if (
            value is not None
            and not exception_only
            and not issubclass(etype, SyntaxError)
            and not hasattr(value, "_render_traceback_")
            and _contains_exception_group(value)
        ):
            import traceback

            # Drop IPython's own frames above the cell, as its tb_offset does for other errors.
            tb = _skip_machinery(tb) or tb
            self._showtraceback(etype, value, traceback.format_exception(etype, value, tb))
            return
        return super().showtraceback(
            exc_tuple, filename, tb_offset, exception_only, running_compiled_code
        )

    def showsyntaxerror(self, filename=None, running_compiled_code=False):
        _S.critical += 1
        outer = _S.cell_error
        if not _S.showing:  # else: called by showtraceback, which already knows
            _S.cell_error = _called_by_machinery(sys._getframe(1))
        try:
            return super().showsyntaxerror(filename, running_compiled_code)
        finally:
            _S.cell_error = outer
            _S.critical -= 1

    _last_shown = None  # (exception, stb) of the last traceback shown

    def _format_exception_for_storage(self, exception, *args, **kwargs):
        # IPython 9 formats every failed cell's traceback a second time for history_manager
        # .exceptions; reuse the one just shown (half the cost of an error, no second window for a
        # SIGINT to land in).
        last = self._last_shown
        if last is not None and last[0] is exception:
            return {
                "ename": type(exception).__name__,
                "evalue": _safe_str(exception),
                "traceback": last[1],
            }
        _S.critical += 1
        try:
            return super()._format_exception_for_storage(exception, *args, **kwargs)
        finally:
            _S.critical -= 1

    def _showtraceback(self, etype, evalue, stb):
        # Every traceback IPython shows ends here, including SyntaxError/IndentationError (via
        # showsyntaxerror) and SystemExit (exception_only).
        self._last_shown = (evalue, stb)
        lines = _traceback_lines(stb)
        if _S.formatting or not _S.cell_error or _thread.get_ident() != _MAIN_THREAD:
            # A broken _repr_*_, a traceback the user code shows and goes on (%tb, an `except:`
            # calling showtraceback()), one from a background thread: output, not the cell's error.
            try:
                sys.stderr.write("\n".join(lines) + "\n")
            except Exception:
                pass
            return
        _emit_error(_error_name(etype), _safe_str(evalue), lines)

    def show_usage_error(self, exc):
        # `%nonexistent`, bad magic arguments: IPython prints "UsageError: ..." on stderr.
        msg = _safe_str(exc)
        _emit_error("UsageError", msg, ["UsageError: " + msg])


_IPYTHON_CORE = os.path.join("IPython", "core", "")
_MACHINERY = (
    os.path.join("IPython", "core", "interactiveshell.py"),  # run_cell & co: the cell's failure
    os.path.join("IPython", "core", "events.py"),  # a failing pre/post_run_cell callback
)


def _called_by_machinery(frame):
    """Is this traceback shown by IPython's cell-running machinery (the cell failed), rather than
    by user code, a magic or a library that handles the exception and goes on?"""
    name = frame.f_code.co_filename if frame is not None else ""
    return name.endswith(_MACHINERY)


def _contains_exception_group(value):
    group = getattr(builtins, "BaseExceptionGroup", None)
    depth = 0
    while group is not None and value is not None and depth < 100:
        if isinstance(value, group):
            return True
        value = value.__context__
        depth += 1
    return False


def _show_in_pager(self, data, start=0, screen_lines=0):
    """`obj?`, `%pdoc`, `%pfile`...: no pager, the text goes to stdout."""
    if isinstance(data, dict):
        data = data.get("text/plain", "")
    text = _strip_ansi(_safe_str(data))
    if start:
        text = "\n".join(text.split("\n")[start:])
    print(text)


def _make_shell():
    cfg = Config()
    # History in an in-memory SQLite database: %history (-g, -l...) works for the session, and no
    # file in $HOME, no lock shared by many contexts, no writer thread.
    cfg.HistoryManager.hist_file = ":memory:"
    cfg.InteractiveShell.colors = "nocolor"
    cfg.InteractiveShell.autoindent = False
    cfg.InteractiveShell.autocall = 0
    cfg.InteractiveShell.automagic = True
    cfg.InteractiveShell.xmode = "Context"
    cfg.InteractiveShell.enable_html_pager = False
    cfg.InteractiveShell.sphinxify_docstring = False
    cfg.InteractiveShell.warn_venv = False
    shell = LizardShell.instance(config=cfg)
    shell.input_transformer_manager = LizardTransformerManager()
    shell.set_hook("show_in_pager", _show_in_pager)
    shell.loop_runner = _AsyncRunner()
    # IPython warns "To exit: use 'exit', 'quit', or Ctrl-D." after SystemExit: not how a context
    # ends (the SystemExit error event already says what happened).
    import warnings

    warnings.filterwarnings("ignore", message="To exit: use 'exit', 'quit', or Ctrl-D.")
    _register_data_formatters(shell)
    _install_pil_show_hook()
    return shell


# --- PIL images shown as results -----------------------------------------------------------------


def _pil_show(self, title=None, **options):
    """`PIL.Image.Image.show` in a kernel: the image becomes a result (`display`), as in E2B's
    kernel, instead of an external viewer that a sandbox does not have."""
    from IPython.display import display

    display(self)


class _PilShowHook:
    """A `sys.meta_path` finder that patches `PIL.Image.Image.show` with `_pil_show` right after
    `PIL.Image` is first imported, so the kernel never imports PIL itself (start-up stays fast).
    A PIL image left as a cell's last value needs nothing: its `_repr_png_` makes it a PNG result."""

    def find_spec(self, name, path, target=None):
        if name != "PIL.Image":
            return None
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if spec is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(loader)
        return spec


class _PatchingLoader:
    """Delegates to the real loader, then patches the module (see `_PilShowHook`)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        image = getattr(module, "Image", None)
        if isinstance(image, type):
            image.show = _pil_show


def _install_pil_show_hook():
    image = sys.modules.get("PIL.Image")
    if image is not None:  # already imported (by a site hook): patch it now
        image.Image.show = _pil_show
    elif not any(isinstance(f, _PilShowHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _PilShowHook())


# --- Data behind tables and charts ---------------------------------------------------------------

TABLE_MIME = "application/vnd.lizard.table+json"
CHART_MIME = "application/vnd.lizard.chart+json"
# Beyond this many cells a DataFrame's data is left out of its result (its text and HTML remain).
TABLE_MAX_CELLS = 1_000_000


def _table_data(df):
    """A DataFrame as {column: [values...]} (E2B's `data`): JSON values, timestamps as ISO strings,
    NaN as null."""
    if df.shape[0] * max(df.shape[1], 1) > TABLE_MAX_CELLS:
        return None
    return {
        _safe_str(col): json.loads(df[col].to_json(orient="values", date_format="iso"))
        for col in df.columns
    }


def _chart_data(fig):
    """A matplotlib figure as a chart object (type, title, axes, elements), when it is a chart the
    `e2b_charts` package understands; nothing otherwise."""
    import warnings

    try:
        from e2b_charts import chart_figure_to_dict

        # Its warnings (pydantic's about numpy ticks of a box plot) are about our extraction, not
        # the user's code: they stay out of the cell's stderr.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chart = chart_figure_to_dict(fig)
    except Exception:
        return None
    return chart or None


def _register_data_formatters(shell):
    """Two extra MIME types next to a value's text/HTML/PNG: the data of a pandas DataFrame and the
    chart behind a matplotlib figure. The formatters look the types up in `sys.modules`, so neither
    pandas nor matplotlib is imported until user code imports it (and matplotlib-inline, which drops
    every Figure printer of every formatter when it loads, cannot unregister them)."""
    from IPython.core.formatters import BaseFormatter
    from traitlets import Unicode

    def instance_of(obj, module, name):
        mod = sys.modules.get(module)
        cls = getattr(mod, name, None) if mod is not None else None
        return cls is not None and isinstance(obj, cls)

    display = shell.display_formatter

    def data_formatter(mime, module, name, data):
        class DataFormatter(BaseFormatter):
            format_type = Unicode(mime)
            _return_type = dict
            # Nothing but an instance of `module.name` (`LizardFormatter._plain_only`).
            _answers_only_its_types = True

            def __call__(self, obj):
                if not instance_of(obj, module, name):
                    return None
                try:
                    return data(obj)
                except Exception:
                    return None

        display.formatters[mime] = DataFormatter(parent=display)
        _QUIET_FORMATTERS.add(DataFormatter)

    data_formatter(TABLE_MIME, "pandas", "DataFrame", _table_data)
    data_formatter(CHART_MIME, "matplotlib.figure", "Figure", _chart_data)
    # `active_types` defaults to the formatters present when it is first read.
    active = list(display.active_types)
    display.active_types = active + [t for t in (TABLE_MIME, CHART_MIME) if t not in active]


# --- The run loop --------------------------------------------------------------------------------


def _apply_env(env, saved):
    for key, value in env.items():
        key = _safe_str(key)
        if key not in saved:
            saved[key] = os.environ.get(key)
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value if isinstance(value, str) else _safe_str(value)


def _restore_env(saved):
    for key, old in saved.items():
        try:
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        except Exception:
            pass


def _skip_machinery(tb):
    """Drop the runner's and IPython's own frames above the user's code (IPython's tb_offset)."""
    while tb is not None and (
        tb.tb_frame.f_code.co_filename == _RUNNER_FILE
        or _IPYTHON_CORE in tb.tb_frame.f_code.co_filename
    ):
        tb = tb.tb_next
    return tb


def _exception_lines(exc):
    """A plain traceback for an error IPython did not show (e.g. a KeyboardInterrupt that hit its
    machinery outside the cell's code: then only the exception line remains)."""
    import traceback

    _trim_runner_frames(exc)
    try:
        tb = _skip_machinery(exc.__traceback__)
        if tb is None:
            text = "".join(traceback.format_exception_only(type(exc), exc))
        else:
            text = "".join(traceback.format_exception(type(exc), exc, tb))
        return _strip_ansi(text).splitlines()
    except Exception:
        return ["%s: %s" % (type(exc).__name__, _safe_str(exc))]


def _execute(shell, msg):
    run_id = msg.get("id")
    code = msg.get("code")
    env = msg.get("env") or {}
    if not isinstance(code, str) or not isinstance(env, dict):
        _emit({"ev": "protocol_error", "message": "exec needs a string 'code' and an object 'env'"})
        return
    run = _Run(run_id)
    saved = {}
    result = None
    escaped = None
    _S.run = run
    _S.pending = False
    _S.async_cancelled = False
    try:
        _S.in_cell = True
        _apply_env(env, saved)
        result = shell.run_cell(code, store_history=True)
    except BaseException as e:
        # A KeyboardInterrupt that landed in IPython's machinery outside its own handlers, a
        # SystemExit from a post_execute callback, a bad `env` name...: still one error + done.
        escaped = e
    finally:
        _S.in_cell = False
    # From here on SIGINT is ignored: the run is over, only its answer remains to be written.
    _S.pending = False
    _restore_env(saved)

    # User code may have replaced the SIGINT handler or closed the standard streams.
    if signal.getsignal(signal.SIGINT) is not _on_sigint:
        try:
            signal.signal(signal.SIGINT, _on_sigint)
        except Exception:
            pass
    if sys.stdout is None or getattr(sys.stdout, "closed", False):
        sys.stdout = _make_stream(1, "<stdout>")
    if sys.stderr is None or getattr(sys.stderr, "closed", False):
        sys.stderr = _make_stream(2, "<stderr>")

    exc = escaped
    if exc is None and result is not None:
        exc = result.error_before_exec or result.error_in_exec
    interrupted = (
        isinstance(exc, KeyboardInterrupt)
        or run.error_name == "KeyboardInterrupt"
        or (_S.async_cancelled and type(exc).__name__ == "CancelledError")
    )
    if exc is not None and run.error_name is None:
        # Failures IPython reported elsewhere (or not at all): the run still gets its error event.
        _emit_error(
            "KeyboardInterrupt" if interrupted else type(exc).__name__,
            _safe_str(exc),
            _exception_lines(exc),
        )
    if exc is None and run.error_name is None:
        status = "ok"
    else:
        status = "interrupted" if interrupted else "error"
    _flush_stdio()
    _flush_decoders()
    _emit({"ev": "done", "id": run_id, "status": status}, interruptible=False)
    _S.run = None
    _S.async_cancelled = False



# --- Hibernation: save and restore the user namespace (see kernels/PROTOCOL.md) ----------------

# IPython's own names in the user namespace: never saved (a fresh shell makes its own).
_HIBERNATE_SKIP = {
    "In", "Out", "_", "__", "___", "_oh", "_dh", "_ih", "_ii", "_iii", "exit", "quit",
    "get_ipython", "_exit_code", "__builtin__", "__builtins__", "__name__", "__doc__",
    "__spec__", "__loader__", "__package__",
}
_HIBERNATE_STATE = "state.pkl"
_HIBERNATE_BUFFERS = "buffers.bin"
_HIBERNATE_META = "meta.json"
# Buffers (numpy arrays, pandas columns...) at least this big go out-of-band into buffers.bin and
# come back memory-mapped copy-on-write: a resume does not read them before they are used.
_OUT_OF_BAND_MIN = 1 << 20


def _hibernate_skipped(shell, name):
    if name in _HIBERNATE_SKIP or name.startswith("__"):
        return True
    if len(name) > 1 and name[0] == "_" and (name[1:].isdigit() or name[1:2] == "i"):
        # _1, _2 (outputs), _i, _i1, _ii... (inputs)
        rest = name[1:].lstrip("i")
        if rest == "" or rest.isdigit():
            return True
    hidden = getattr(shell, "user_ns_hidden", {})
    return name in hidden and hidden[name] is shell.user_ns.get(name)


def _never_survives(value):
    """Objects that hold a live OS or interpreter resource: they never survive a new process,
    whatever a pickling library claims. Returns the reason, or None."""
    import types

    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType)):
        return "generator: its suspended frame cannot be saved"
    if isinstance(value, types.CoroutineType):
        return "coroutine: its suspended frame cannot be saved"
    checks = (
        ("socket", "socket", "open socket: the connection ends with the process"),
        ("threading", "Thread", "thread: threads do not survive the process"),
        ("subprocess", "Popen", "subprocess: child processes are stopped at hibernation"),
        ("sqlite3", "Connection", "database connection: reconnect after resume"),
        ("sqlite3", "Cursor", "database cursor: reconnect after resume"),
        ("io", "IOBase", "open file: reopen it after resume (the file itself is kept)"),
        ("asyncio", "AbstractEventLoop", "event loop: not restorable"),
        ("asyncio", "Task", "asyncio task: not restorable"),
    )
    for mod, attr, reason in checks:
        m = sys.modules.get(mod)
        t = getattr(m, attr, None) if m is not None else None
        if isinstance(t, type) and isinstance(value, t):
            return reason
    return None


class _CountingSink:
    """A write-only file that only counts: lets a pickler test a value without copying it."""

    def __init__(self):
        self.n = 0

    def write(self, b):
        n = memoryview(b).nbytes
        self.n += n
        return n


def _pickler_class():
    try:
        import cloudpickle  # functions and classes defined in cells are pickled by value

        return cloudpickle.Pickler, "cloudpickle"
    except Exception:
        import pickle

        return pickle.Pickler, "pickle"


def _item_kind(value):
    import types

    if isinstance(value, type):
        return "class"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return "function"
    return "variable"


def _snapshot(shell, d):
    """Save the user namespace into directory `d`: modules as imports, everything else pickled
    (protocol 5) into one file so objects keep their identities (an instance keeps its class).
    Values are tried one by one first; what fails is reported with the reason and skipped."""
    import json
    import types

    os.makedirs(d, exist_ok=True)
    Pickler, lib = _pickler_class()
    saved, lost, imports, good = [], [], [], {}
    for name, value in list(shell.user_ns.items()):
        if not isinstance(name, str) or _hibernate_skipped(shell, name):
            continue
        if isinstance(value, types.ModuleType):
            modname = getattr(value, "__name__", None)
            if modname and modname in sys.modules and modname != "__main__":
                imports.append([name, modname])
                saved.append({"name": name, "kind": "module"})
            else:
                lost.append({"name": name, "reason": "module that cannot be imported again"})
            continue
        reason = _never_survives(value)
        if reason is None:
            try:
                Pickler(_CountingSink(), protocol=5).dump(value)
            except BaseException as e:  # noqa: BLE001 - any failure means "not saved"
                if isinstance(e, KeyboardInterrupt):
                    raise
                reason = "cannot be saved (%s: %s)" % (type(e).__name__, _safe_str(e)[:200])
        if reason is not None:
            lost.append({"name": name, "reason": reason})
            continue
        good[name] = value
        saved.append({"name": name, "kind": _item_kind(value)})
    big = []

    def out_of_band(buf):
        try:
            if buf.raw().nbytes >= _OUT_OF_BAND_MIN:
                big.append(buf)
                return False
        except BufferError:  # not contiguous: in-band
            pass
        return True

    with open(os.path.join(d, _HIBERNATE_STATE), "wb", buffering=1 << 20) as f:
        try:
            Pickler(f, protocol=5, buffer_callback=out_of_band).dump(good)
        except Exception as e:
            big.clear()
            # Each value pickled on its own; together they did not (should not happen): say so.
            for item in saved:
                if item["name"] in good:
                    lost.append({"name": item["name"], "reason": "cannot be saved (%s)" % _safe_str(e)[:200]})
            saved = [i for i in saved if i["name"] not in good]
            f.seek(0)
            f.truncate()
            Pickler(f, protocol=5).dump({})
    buffers = []
    with open(os.path.join(d, _HIBERNATE_BUFFERS), "wb", buffering=0) as f:
        pos = 0
        for buf in big:
            raw = buf.raw()
            f.write(raw)
            buffers.append([pos, raw.nbytes])
            pad = -raw.nbytes % 64  # keeps every buffer 64-byte aligned for numpy
            if pad:
                f.write(bytes(pad))
            pos += raw.nbytes + pad
    cwd = os.getcwd()
    saved.append({"name": cwd, "kind": "cwd"})
    env = dict(os.environ)
    meta = {
        "imports": imports,
        "cwd": cwd,
        "env": env,
        "execution_count": getattr(shell, "execution_count", 1),
        "buffers": buffers,
        "pickler": lib,
    }
    with open(os.path.join(d, _HIBERNATE_META), "w") as f:
        json.dump(meta, f)
    return saved, lost


def _restore(shell, d):
    import importlib
    import json
    import pickle

    restored, lost = [], []
    with open(os.path.join(d, _HIBERNATE_META)) as f:
        meta = json.load(f)
    for name, modname in meta.get("imports", []):
        try:
            shell.user_ns[name] = importlib.import_module(modname)
            restored.append({"name": name, "kind": "module"})
        except Exception as e:
            lost.append({"name": name, "reason": "import %s failed: %s" % (modname, _safe_str(e)[:200])})
    try:
        buffers = []
        spans = meta.get("buffers") or []
        if spans:
            import mmap

            with open(os.path.join(d, _HIBERNATE_BUFFERS), "rb") as f:
                # Private and writable: changes stay in this process, the file is never written.
                view = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))
            buffers = [view[off:off + n] for off, n in spans]
        with open(os.path.join(d, _HIBERNATE_STATE), "rb", buffering=1 << 20) as f:
            values = pickle.load(f, buffers=buffers)
        for name, value in values.items():
            shell.user_ns[name] = value
            restored.append({"name": name, "kind": _item_kind(value)})
    except Exception as e:
        lost.append({"name": "*", "reason": "saved values could not be loaded: %s" % _safe_str(e)[:200]})
    for key, value in (meta.get("env") or {}).items():
        # The agent's own variables and the sandbox's name are the new kernel's (a clone is
        # another sandbox), never the saved ones.
        if key.startswith("LIZARD_") or key == "HOSTNAME":
            continue
        if os.environ.get(key) != value:
            try:
                os.environ[key] = value
            except Exception:
                pass
    cwd = meta.get("cwd")
    if cwd:
        try:
            os.chdir(cwd)
            restored.append({"name": cwd, "kind": "cwd"})
        except OSError as e:
            lost.append({"name": cwd, "reason": "cwd: %s" % _safe_str(e)})
    count = meta.get("execution_count")
    if isinstance(count, int) and count > 0:
        shell.execution_count = count
    return restored, lost


def _hibernate_op(shell, msg):
    """`snapshot` / `restore` control messages: answered with one `report` event and `done`."""
    run_id = msg.get("id")
    d = msg.get("dir")
    status = "ok"
    items, lost = [], []
    try:
        if not isinstance(d, str) or not d:
            raise ValueError("%s needs a string 'dir'" % msg.get("op"))
        if msg.get("op") == "snapshot":
            items, lost = _snapshot(shell, d)
        else:
            items, lost = _restore(shell, d)
    except BaseException as e:  # noqa: BLE001 - the agent must get an answer
        status = "error"
        lost.append({"name": "*", "reason": "%s: %s" % (type(e).__name__, _safe_str(e)[:300])})
    _S.pending = False
    _emit({"ev": "report", "id": run_id, "items": items, "lost": lost}, interruptible=False)
    _emit({"ev": "done", "id": run_id, "status": status}, interruptible=False)


def _exit_watchdog(seconds):
    """After the control fd closed: if interpreter shutdown hangs (a non-daemon thread started by
    user code), end the process anyway."""
    import threading

    def kill():
        time.sleep(seconds)
        os._exit(0)

    threading.Thread(target=kill, name="lizard-exit", daemon=True).start()


# --- Fork of a live kernel (PROTOCOL.md, "Fork of a live kernel") -------------------------------


def _fork_op(shell, msg):
    """`fork`: fork this kernel, between cells, into a new one whose channels are the FIFOs in
    `dir` and whose cgroup is the one of the `tasks` files listed (written while single-threaded). Like the zygote: an
    intermediate forks the new kernel and exits, so the new kernel's parent is the agent. Here
    (the source) the answer is `forked` (the new kernel's pid, what it does not have) and `done`;
    returns False. In the new kernel it returns True, with the channels in place (the caller says
    `ready` and goes on reading its own control channel, with every global of the source)."""
    run_id = msg.get("id")
    d = msg.get("dir")
    procs = msg.get("cgroup") or []
    lost = []
    try:
        if not isinstance(d, str) or not d:
            raise ValueError("fork needs a string 'dir'")
        if not isinstance(procs, list) or not all(isinstance(p, str) for p in procs):
            raise ValueError("fork's 'cgroup' must be a list of paths")
        import threading
        import warnings

        for t in threading.enumerate():
            if t is not threading.main_thread() and t.is_alive():
                lost.append({"name": "thread %s" % t.name,
                             "reason": "only the forking thread survives a fork: the thread runs "
                                       "in the source context only"})
        try:
            native = len(os.listdir("/proc/self/task")) - threading.active_count()
        except OSError:
            native = 0
        if native > 0:
            lost.append({"name": "%d native thread(s)" % native,
                         "reason": "threads of C libraries (BLAS, OpenMP, ...) do not survive a "
                                   "fork; most libraries start new ones in the fork when needed"})
        try:
            from IPython.core import async_helpers

            loop = async_helpers._asyncio_event_loop
            if loop is not None and not loop.is_closed():
                import asyncio

                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                if pending:
                    lost.append({"name": "asyncio tasks",
                                 "reason": "%d pending task(s) of the asyncio loop stay with the "
                                           "source: the fork gets a new loop" % len(pending)})
        except Exception:
            pass
        r, w = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "this process is multi-threaded": said in `lost`
            mid = os.fork()
        if mid == 0:
            os.close(r)
            intermediate = os.getpid()  # not getppid() in the kernel: it may have exited already
            try:
                kid = os.fork()
            except OSError:
                os._exit(1)
            if kid == 0:
                os.close(w)
                _become_fork(d, procs, intermediate)
                return True
            try:
                os.setpgid(kid, kid)  # both sides set the group: the agent may signal it at once
            except OSError:
                pass
            os.write(w, str(kid).encode())
            os._exit(0)
        os.close(w)
        # The intermediate writes the pid right after its fork; its exit (unmapping its copy of
        # this process, a few ms) is not waited for here: it is reaped at the next control
        # message (the new kernel waits for that exit itself before its first message).
        _INTERMEDIATES.append(mid)
        with os.fdopen(r, "rb") as f:
            kid = int(f.read(32) or b"0")
        if kid <= 0:
            _reap_intermediates()
            raise OSError("the fork failed")
        _emit({"ev": "forked", "id": run_id, "pid": kid, "lost": lost}, interruptible=False)
        _emit({"ev": "done", "id": run_id, "status": "ok"}, interruptible=False)
    except BaseException as e:  # noqa: BLE001 - the agent must get an answer
        _S.pending = False
        _emit({"ev": "error", "id": run_id, "name": type(e).__name__, "value": _safe_str(e)[:300],
               "traceback": []}, interruptible=False)
        _emit({"ev": "done", "id": run_id, "status": "error"}, interruptible=False)
    return False


_INTERMEDIATES = []  # a source kernel's intermediates of forks, not reaped yet


def _reap_intermediates():
    while _INTERMEDIATES:
        mid = _INTERMEDIATES.pop()
        while True:
            try:
                os.waitpid(mid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break  # user code reaped it (os.wait)


def _become_fork(d, procs, intermediate):
    """In the new kernel of a `fork`: its own channels, process group and cgroup."""
    global _PENDING_REPARENT
    try:
        ctl = os.open(os.path.join(d, "control"), os.O_RDONLY | os.O_CLOEXEC)
        out = os.open(os.path.join(d, "stdout"), os.O_WRONLY | os.O_CLOEXEC)
        err = os.open(os.path.join(d, "stderr"), os.O_WRONLY | os.O_CLOEXEC)
        evt = os.open(os.path.join(d, "events"), os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        os._exit(71)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.dup2(evt, _EVENT_FD, inheritable=False)
    os.dup2(ctl, _CONTROL_FD, inheritable=False)
    for fd in (ctl, out, err, evt):
        os.close(fd)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    for p in procs:
        try:
            with open(p, "w") as f:
                f.write("0")
        except OSError as e:
            os.write(2, ("lizard: cannot join the fork's cgroup: %s\n" % e).encode())
            os._exit(72)
    _PENDING_REPARENT = intermediate
    _INTERMEDIATES.clear()  # the source's children, not this kernel's
    _S.pending = False
    _S.in_cell = False
    _S.run = None
    # No event loop may be shared with the source (its epoll fd would be).
    try:
        from IPython.core import async_helpers

        async_helpers._asyncio_event_loop = None
    except Exception:
        pass


# --- The zygote ----------------------------------------------------------------------------------


def _next_request(sock, max_fds, expected, valid):
    """The next request on the SOCK_SEQPACKET socket `sock` (a JSON object with up to `max_fds`
    fds) that `valid(request, fds)` accepts; any other is answered `{"error":…}` naming `expected`,
    and its fds closed. This process exits once its peer (the agent, or the server for a host
    zygote) has closed the socket."""
    import socket

    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 65536, max_fds)
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)
        if not data:
            os._exit(0)
        try:
            req = json.loads(data)
            if not isinstance(req, dict) or not valid(req, fds):
                raise ValueError("expected %s" % expected)
        except Exception as e:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": "bad request: %s" % _safe_str(e)}).encode())
            continue
        return req, fds


def _zygote_serve(zfd):
    """Serve fork requests on the SOCK_SEQPACKET socket `zfd` until the agent closes it. Returns
    only in a forked kernel, which then continues as a freshly started runner would.

    Request: `{"op":"fork","cwd":PATH}` with four fds (stdout, stderr, event, control pipe ends).
    The zygote forks an intermediate that forks the kernel, sends `{"pid":N}` with the kernel's
    pidfd, and exits; the kernel is thereby re-parented to the agent (PID 1 or a subreaper), which
    reaps it like a spawned kernel. Failures answer `{"error":TEXT}`."""
    import socket

    global _SITE_AT_START
    _SITE_AT_START = _site_dirs()
    sock = socket.socket(fileno=zfd)
    sock.setblocking(True)
    sock.send(b'{"ev":"ready"}')
    while True:
        req, fds = _next_request(sock, 8, "{op: fork, cwd} with 4 fds", lambda r, fds: (
            r.get("op") == "fork" and isinstance(r.get("cwd"), str) and len(fds) == 4))
        cwd = req["cwd"]
        try:
            mid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": "fork: %s" % e}).encode())
            continue
        if mid == 0:
            intermediate = os.getpid()
            try:
                kid = os.fork()
            except OSError as e:
                sock.send(json.dumps({"error": "fork: %s" % e}).encode())
                os._exit(1)
            if kid == 0:
                sock.close()
                _become_kernel(fds, cwd, intermediate, req)
                return
            # Both sides set the group (classic race fix): the agent may signal it right away.
            try:
                os.setpgid(kid, kid)
            except OSError:
                pass
            try:
                pidfd = os.pidfd_open(kid)
                socket.send_fds(sock, [json.dumps({"pid": kid}).encode()], [pidfd])
            except OSError as e:
                try:
                    sock.send(json.dumps({"error": "pidfd: %s" % e}).encode())
                except OSError:
                    pass
            os._exit(0)
        for fd in fds:
            os.close(fd)
        while True:
            try:
                os.waitpid(mid, 0)
                break
            except ChildProcessError:
                break


def _site_dirs():
    """The site-packages directories a fresh interpreter would consider, user site first, with the
    .pth files each holds (None: the directory does not exist)."""
    found = {}
    for d in _site_dirs_names():
        try:
            found[d] = {n for n in os.listdir(d) if n.endswith(".pth")}
        except OSError:
            found[d] = None
    return found


_SITE_AT_START = None  # the zygote's _site_dirs(), taken before it serves forks


def _refresh_site():
    global _SITE_AT_START
    import importlib
    import site

    known = {os.path.normcase(os.path.abspath(p)) for p in sys.path if p}
    globals_ = [d for d in (getattr(site, "getsitepackages", lambda: [])()) if d in sys.path]
    for d, pths in _site_dirs().items():
        if pths is None:
            continue
        before = (_SITE_AT_START or {}).get(d)
        if before is None:
            site.addsitedir(d, known)
            # The user site goes before the global site-packages, as at interpreter start.
            if globals_ and d in sys.path and d not in globals_:
                sys.path.remove(d)
                sys.path.insert(sys.path.index(globals_[0]), d)
        else:
            for name in sorted(pths - before):
                site.addpackage(d, name, known)
    importlib.invalidate_caches()
    # What was taken in is the baseline of the next refresh (`_LateSiteFinder`): no .pth file is
    # processed twice.
    _SITE_AT_START = _site_dirs()


class _LateSiteFinder:
    """Last on `sys.meta_path`: a top-level import nothing found may be of a package installed
    after the kernel started into a site directory that did not exist then — the seeds'
    `subprocess.run(["pip", "install", X])` from a cell installs into the user site
    (`~/.local/lib/python3.X/site-packages`), which a fresh sandbox does not have, so it is not
    on `sys.path`. If a site directory appeared or changed since the last look (a `stat` each,
    nothing more on the common path: optional imports that fail are frequent), refresh the site
    dirs (`_refresh_site`: the new directory and its .pth files, fresh finder caches) and look
    once more."""

    _seen = None  # {site dir: its mtime, None if missing}

    @classmethod
    def _changed(cls):
        now = {}
        for d in _site_dirs_names():
            try:
                now[d] = os.stat(d).st_mtime_ns
            except OSError:
                now[d] = None
        changed = cls._seen is not None and now != cls._seen
        cls._seen = now
        return changed

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is not None:
            return None  # a submodule: its package's own path, nothing of the site's
        if not cls._changed():
            return None
        _refresh_site()
        import importlib.machinery

        return importlib.machinery.PathFinder.find_spec(name, None, target)

    @classmethod
    def install(cls):
        global _SITE_AT_START
        if _SITE_AT_START is None:  # a spawned kernel: what its interpreter's start took in
            _SITE_AT_START = _site_dirs()
        cls._seen = None
        cls._changed()  # the baseline: what the kernel starts with
        if not any(f is cls for f in sys.meta_path):
            sys.meta_path.append(cls)


def _site_dirs_names():
    import site

    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        dirs.insert(0, site.getusersitepackages())
    return dirs


_PENDING_REPARENT = None  # in a forked kernel until its first message: the intermediate's pid


def _wait_for_reparent(intermediate):
    """Return once the intermediate process that forked this kernel has exited: its exit
    re-parents the kernel to the agent (a pidfd polls readable only after that), so that
    os.getppid() is the agent from the first cell on. Called at the first control message, not
    at start-up: the intermediate's exit (unmapping its copy of the zygote, a few ms) then
    overlaps the create's answer instead of delaying `ready`. Bounded, in case something holds
    it."""
    if os.getppid() != intermediate:
        return
    try:
        fd = os.pidfd_open(intermediate)
    except OSError:
        return  # already gone
    try:
        import select

        select.select([fd], [], [], 5.0)
    finally:
        os.close(fd)


def _set_not_dumpable():
    """prctl(PR_SET_DUMPABLE, 0): no other process of the sandbox may read this kernel's memory
    (/proc/<pid>/mem) or open its fds (/proc/<pid>/fd/...), whatever its uid."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception as e:  # noqa: BLE001 - a kernel without ctypes still runs
        os.write(2, ("lizard: cannot make the kernel non-dumpable: %s\n" % _safe_str(e)).encode())


def _take_identity(req):
    """The sandbox's identity from the fork request (the zygote may predate a CRIU restore: then
    the agent names the clone's own id); only these two names are taken."""
    env = req.get("env")
    if not isinstance(env, dict):
        return
    for key in ("LIZARD_SANDBOX_ID", "HOSTNAME"):
        value = env.get(key)
        if isinstance(value, str) and value and "\0" not in value:
            os.environ[key] = value


def _drop_to_user(req):
    """In a forked child of the (root) zygote: become the context's user, as the fork request
    says — no supplementary groups, its gid, its uid (all three of each: nothing can switch back;
    the change away from uid 0 clears every capability), its umask, HOME and user name — and the
    user site the zygote (started with -s) left out."""
    uid, gid = req.get("uid"), req.get("gid")
    if not isinstance(uid, int) or not isinstance(gid, int):
        return
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        os.write(2, b"lizard: the kernel could not drop to its user\n")
        os._exit(1)
    umask = req.get("umask")
    if isinstance(umask, int):
        os.umask(umask)
    home = req.get("home")
    if isinstance(home, str) and home:
        os.environ["HOME"] = home
    user = req.get("user")
    if isinstance(user, str) and user:
        os.environ["USER"] = user
        os.environ["LOGNAME"] = user
    import site

    # The user site of the user's HOME (the zygote computed its own, and did not use it).
    site.USER_BASE = None
    site.USER_SITE = None
    site.ENABLE_USER_SITE = True


def _become_kernel(fds, cwd, intermediate, req=None):
    """In a forked child: put the protocol fds in place and reset per-process state, so that what
    follows is indistinguishable from a freshly spawned runner."""
    import fcntl

    global _PENDING_REPARENT
    _PENDING_REPARENT = intermediate

    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds]
    for fd in fds:
        os.close(fd)
    out, err, evt, ctl = high
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.dup2(evt, _EVENT_FD, inheritable=False)
    os.dup2(ctl, _CONTROL_FD, inheritable=False)
    for fd in high:
        os.close(fd)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    # Before anything of the context's: its user (the zygote is the sandbox's root).
    try:
        _drop_to_user(req or {})
    except Exception as e:  # noqa: BLE001 - never run the context as root
        os.write(2, ("lizard: cannot become the context's user: %s\n" % _safe_str(e)).encode())
        os._exit(1)
    _set_not_dumpable()
    _take_identity(req or {})
    try:
        os.chdir(cwd)
    except OSError as e:
        os.write(2, ("lizard: cannot enter the working directory %r: %s\n" % (cwd, e)).encode())
        os._exit(1)
    # What the file system says now, not when the zygote started: site dirs and .pth files that
    # appeared since (`pip install --user` makes ~/.local/.../site-packages), fresh finder caches.
    try:
        _refresh_site()
    except Exception as e:
        os.write(2, ("lizard: refreshing site-packages: %s\n" % _safe_str(e)).encode())
    # Fresh random state (the stdlib also reseeds `random` at fork; numpy does not).
    import random

    random.seed()
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        try:
            np_random.seed()
        except Exception:
            pass
    # No event loop may be shared with the zygote or a sibling (its epoll fd would be).
    try:
        from IPython.core import async_helpers

        async_helpers._asyncio_event_loop = None
    except Exception:
        pass


# --- The host zygote (docs/design/shared-zygote.md) ---------------------------------------------

# Where the host zygote keeps the native entry the server sent (its own tmpfs /tmp).
_ENTRY_PATH = "/tmp/lizard_zygote_entry.so"
# setns(pidfd, USER | MNT | PID | UTS | IPC | NET | CGROUP): every namespace of the sandbox's
# PID 1 (the cgroup one too, or its kernels' /proc/self/cgroup would show the host's paths).
_JOIN_NAMESPACES = (0x10000000 | 0x20000 | 0x20000000 | 0x4000000 | 0x8000000 | 0x40000000
                    | 0x02000000)


def _host_zygote_serve(sfd):
    """Serve the server on the SOCK_SEQPACKET socket `sfd`: first `{"op":"entry"}` with one fd (the
    native entry, `lizard_jail::zygote_entry`), answered by `{"ev":"ready"}`; then `{"op":"join",
    "socket":PATH,"caps":MASK,"securebits":BITS}` with the sandbox's PID 1 pidfd and its
    `cgroup.procs` descriptors, answered by `{"pid":N}` (the joined process's host pid) or
    `{"error":TEXT}`. Returns only in a process that joined a sandbox: the fd of its connection to
    that sandbox's agent, which it then serves as the agent's own zygote would."""
    import ctypes
    import socket

    libc = ctypes.CDLL(None, use_errno=True)
    # A child subreaper: the middle process of a join's double fork is orphaned (its parent, the
    # join's first child, exits at once) and comes here to be reaped, whenever it exits.
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    signal.signal(signal.SIGCHLD, _reap_children)
    sock = socket.socket(fileno=sfd)
    sock.setblocking(True)
    data, fds, _flags, _addr = socket.recv_fds(sock, 4096, 1)
    if not data or len(fds) != 1:
        os._exit(0)
    with os.fdopen(fds[0], "rb") as src, open(_ENTRY_PATH, "wb") as dst:
        dst.write(src.read(1 << 22))
    entry = ctypes.CDLL(_ENTRY_PATH)
    entry.lizard_zygote_remap.restype = ctypes.c_long
    entry.lizard_zygote_remap.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    sock.send(b'{"ev":"ready"}')
    while True:
        req, fds = _next_request(sock, 16, "{op: join, socket, caps, securebits} with fds",
                                 lambda r, fds: (r.get("op") == "join" and bool(fds)
                                                 and isinstance(r.get("socket"), str)
                                                 and isinstance(r.get("caps"), int)
                                                 and isinstance(r.get("securebits"), int)))
        r, w = os.pipe()
        first = os.fork()
        if first == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(r)
            sock.close()
            me = os.getpid()
            try:
                return _join(libc, entry, req, fds, w)  # in the joined process only
            except BaseException as e:  # noqa: BLE001 - the server must get an answer
                line = ("error %s\n" % _safe_str(e))[:1000].encode()
                try:
                    # The first child reports to the host zygote; past it (inside the sandbox)
                    # `w` is closed, and the log (fd 2, until the join replaces it) says why.
                    os.write(w if os.getpid() == me else 2, line)
                except OSError:
                    pass
                os._exit(1)
        os.close(w)
        for fd in fds:
            os.close(fd)
        # Nothing here waits on a process of the sandbox: the first child is outside its pid
        # namespace (the sandbox cannot name it, let alone stop it), and it writes its one line
        # before it exits. What the joined process does next is the agent's to see.
        while True:
            try:
                os.waitpid(first, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
        os.set_blocking(r, False)
        try:
            report = os.read(r, 4096).decode("utf-8", "replace").splitlines()
        except OSError:
            report = []
        os.close(r)
        pid = next((int(l[4:]) for l in report if l.startswith("pid ")), None)
        if pid is not None:
            sock.send(json.dumps({"pid": pid}).encode())
        else:
            why = next((l[6:] for l in report if l.startswith("error ")), "no report")
            sock.send(json.dumps({"error": "join: %s" % why}).encode())


def _reap_children(_signum, _frame):
    """SIGCHLD in the host zygote: reap whatever has exited (the joins' first children and, as a
    subreaper, their orphaned middle processes: a zombie of a sandbox's pid namespace whose parent
    is outside would keep that namespace from ever ending)."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return
        except InterruptedError:
            continue


# How long a joined process waits for its agent's adoption socket (the agent waits 10 s for the
# adoption before it starts a zygote of its own).
_JOIN_CONNECT_WAIT = 15.0


def _join(libc, entry, req, fds, w):
    """In the host zygote's child: join the sandbox (docs/design/shared-zygote.md, "The fork's
    steps, in order"), then, in the grandchild that lives in the sandbox's pid namespace, become
    that sandbox's zygote. Returns the fd of the connection to its agent."""
    import ctypes
    import socket

    pidfd, procs = fds[0], fds[1:]
    # 1. Its cgroups, through descriptors the server opened.
    for fd in procs:
        os.write(fd, b"0")
        os.close(fd)
    # 2. Its namespaces: this uid owns the sandbox's user namespace.
    if libc.setns(pidfd, _JOIN_NAMESPACES) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns: %s" % os.strerror(err))
    os.close(pidfd)
    # 3. Into its pid namespace, twice: the first fork's parent (this process) is outside it, so
    # the kernel would give that child a reaper outside too; the second fork's parent is inside,
    # and when it exits the child goes to the sandbox's PID 1, the agent. The joined process is
    # then the agent's child, in the tree CRIU checkpoints, like the agent's own zygote.
    kid = os.fork()
    if kid:
        os.write(w, b"pid %d\n" % kid)  # the middle process's host pid
        os._exit(0)
    os.close(w)  # the host zygote reads nothing from inside the sandbox
    if os.fork():
        os._exit(0)
    # A session of its own (the host zygote's leader is outside the sandbox, which CRIU refuses).
    os.setsid()
    # 4-6. Every file mapping and the exe link onto the sandbox's own files (CRIU needs them there).
    # Dumpable meanwhile: a non-dumpable process's /proc files belong to the host's root, which the
    # sandbox's user namespace does not map, and `pagemap` (0400) could not be opened. Nothing in
    # the sandbox can use the moment: its uid is still the zygote's, which the sandbox does not map,
    # and no process there has CAP_SYS_PTRACE.
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    result = entry.lizard_zygote_remap(_ENTRY_PATH.encode(), len(_ENTRY_PATH))
    libc.prctl(4, 0, 0, 0, 0)
    if result < 0:
        raise OSError(-result & 0xFFFF, "remap failed at stage %d" % (-result >> 16))
    import _ctypes

    _ctypes.dlclose(entry._handle)
    # 7. The sandbox's root.
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    # 8. The agent's capabilities and securebits, no_new_privs, and `setns` refused again.
    _keep_capabilities(libc, req["caps"], req["securebits"])
    _refuse_setns(libc)
    # 9. Descriptors: the sandbox's /dev/null on 0-4, nothing of the host's.
    null = os.open("/dev/null", os.O_RDWR)
    for n in range(5):
        os.dup2(null, n, inheritable=n < 3)
    os.close(null)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 4:
            try:
                os.close(fd)
            except OSError:
                pass
    agent = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # The server asks for the join as soon as the sandbox's PID 1 runs, while the agent is still
    # starting: its socket appears a few milliseconds later. Waiting here costs only this sandbox.
    deadline = time.monotonic() + _JOIN_CONNECT_WAIT
    while True:
        try:
            agent.connect(req["socket"])
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() >= deadline:
                os._exit(1)
            time.sleep(0.002)
    # 10. Dumpable last: the agent may read its /proc files from now on.
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    # The agent's environment for its zygote, then what the agent's own zygote does.
    msg = json.loads(agent.recv(65536) or b"{}")
    env = msg.get("env") if msg.get("op") == "env" else None
    if not isinstance(env, dict):
        os._exit(1)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    _set_user_environment()  # what the runner sets for user code, as at its start
    return agent.detach()


def _keep_capabilities(libc, caps, securebits):
    """Bounding, permitted and effective sets `caps` (inheritable and ambient empty), `securebits`,
    `no_new_privs`: what the agent's own zygote holds."""
    import ctypes

    def ok(ret, what):
        if ret != 0:
            err = ctypes.get_errno()
            raise OSError(err, "%s: %s" % (what, os.strerror(err)))

    ok(libc.prctl(28, securebits, 0, 0, 0), "PR_SET_SECUREBITS")
    for cap in range(64):
        if not caps >> cap & 1 and libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            if ctypes.get_errno() == 22:  # EINVAL: past the kernel's last capability
                break
            ok(-1, "PR_CAPBSET_DROP")
    ok(libc.prctl(47, 4, 0, 0, 0), "PR_CAP_AMBIENT_CLEAR_ALL")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    low, high = caps & 0xFFFFFFFF, caps >> 32
    data = (ctypes.c_uint32 * 6)(low, low, 0, high, high, 0)  # effective, permitted, inheritable
    ok(libc.syscall(126, header, data), "capset")  # SYS_capset
    ok(libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def _refuse_setns(libc):
    """A seccomp filter stacked on the host zygote's (the sandbox's profile but `setns`) that
    refuses `setns` too, so the process has exactly the sandbox's profile."""
    import ctypes
    import struct

    ld, jeq, ret = 0x20, 0x15, 0x06
    program = [
        (ld, 0, 0, 4),  # the architecture
        (jeq, 1, 0, 0xC000003E),  # AUDIT_ARCH_X86_64
        (ret, 0, 0, 0x80000000),  # else kill the process
        (ld, 0, 0, 0),  # the system call's number
        (jeq, 0, 1, 308),  # setns
        (ret, 0, 0, 0x00050000 | 1),  # SECCOMP_RET_ERRNO | EPERM
        (ret, 0, 0, 0x7FFF0000),  # SECCOMP_RET_ALLOW
    ]
    code = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *i) for i in program))
    fprog = struct.pack("=HxxxxxxQ", len(program), ctypes.addressof(code))
    if libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        err = ctypes.get_errno()
        raise OSError(err, "seccomp: %s" % os.strerror(err))


def _warm_up(shell):
    """Take the paths every first cell takes (cell compilation, AST transforms, the formatters),
    invisibly: no history, no execution count, no `_`, no events (no run is active)."""
    try:
        shell.run_cell("pass", store_history=False)
        shell.display_formatter.format(2)
    except Exception:
        pass


def main():
    global _PENDING_REPARENT
    # A spawned kernel, or the zygote: not dumpable from the start (a forked kernel says so again
    # after its uid change).
    _set_not_dumpable()
    shell = _make_shell()
    _warm_up(shell)
    if _ZYGOTE_FD is not None:
        # What every forked kernel imports anyway, imported once here so that it is shared:
        # `importlib.invalidate_caches()` (`_refresh_site`, at each fork) imports
        # `importlib.metadata` (with `email` and `zipfile`), ≈ 2.6 MiB of private pages a kernel
        # otherwise writes for itself.
        import importlib.metadata  # noqa: F401

        # Everything imported so far into the permanent generation: the collector of a forked
        # kernel never walks (and so never writes to) the pages the forks share with the zygote.
        import gc

        gc.collect()
        gc.freeze()
        # A host zygote's serving returns in each process that joined a sandbox, with the fd of
        # its agent's socket; from there on it is that sandbox's zygote.
        zfd = _host_zygote_serve(_ZYGOTE_FD) if _HOST_ZYGOTE else _ZYGOTE_FD
        _zygote_serve(zfd)  # returns in each forked kernel only
    # After the fork: the user's site, not the zygote's.
    _LateSiteFinder.install()
    if _ZYGOTE_FD is not None:
        # A forked kernel shares the zygote's pages until it writes them, and its first cell
        # writes many (reference counts across IPython's machinery): ≈ 2 ms of copy-on-write
        # faults. Taken here, before `ready` (a pooled kernel pays them before it is claimed),
        # invisibly as in the zygote.
        _warm_up(shell)
    control = open(_CONTROL_FD, "rb", buffering=65536, closefd=True)
    _emit({"ev": "ready"})
    while True:
        try:
            line = control.readline()
        except InterruptedError:
            continue
        if not line:
            break
        if not line.strip():
            continue
        if _PENDING_REPARENT is not None:
            _wait_for_reparent(_PENDING_REPARENT)
            _PENDING_REPARENT = None
        if _INTERMEDIATES:
            _reap_intermediates()
        try:
            msg = json.loads(line)
            if not isinstance(msg, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            _emit({"ev": "protocol_error", "message": "bad control line: %s" % _safe_str(e)})
            continue
        op = msg.get("op")
        if op == "exec":
            _execute(shell, msg)
        elif op in ("snapshot", "restore"):
            _hibernate_op(shell, msg)
        elif op == "fork":
            if _fork_op(shell, msg):
                _emit({"ev": "ready"})  # the new kernel
        else:
            _emit({"ev": "protocol_error", "message": "unknown op: %s" % _safe_str(op)})
    _flush_stdio()
    with _EVENT_LOCK:
        if _HELD_LINE:
            _write_event(b"")
    _exit_watchdog(5.0)
    sys.exit(0)


if __name__ == "__main__":
    main()
