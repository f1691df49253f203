// `sandbox.pty`: interactive terminals (E2B-style `create`, `connect`, `sendInput`, `resize`,
// `kill`) over the server's `/v1/sandboxes/{id}/pty` routes. A terminal is a process in the same
// table as commands: its output is the command event stream, the terminal's bytes arriving as
// `stdout` events that always carry `data_b64` (crates/lizard-proto/src/command.rs); killing and
// reattaching go through `/commands/{pid}/…`. Not here: terminal emulation (`onData` gets raw bytes).
import { NDJSON, messageOf, ndjsonFrames } from './http.js';
import { Callbacks, SandboxNamespace, envMap, exitCodeOf, inputBody, positiveMs, streamError } from './commands.js';
import { ConnectionError, InvalidArgumentError, LizardError, NotFoundError, SandboxError } from './errors.js';
const enc = encodeURIComponent;
const MAX_CELLS = 4096;
function isPlainObject(v) {
    return v !== null && typeof v === 'object' && !Array.isArray(v);
}
function checkSize(size, what) {
    if (!isPlainObject(size))
        throw new InvalidArgumentError(`${what} takes { cols, rows }`);
    const { cols, rows } = size;
    for (const [name, v] of [['cols', cols], ['rows', rows]]) {
        if (!Number.isInteger(v) || v < 1 || v > MAX_CELLS) {
            throw new InvalidArgumentError(`${what}: ${name} must be an integer between 1 and ${MAX_CELLS}`);
        }
    }
    return { cols: cols, rows: rows };
}
function checkPid(pid, what) {
    if (!Number.isInteger(pid) || pid <= 0)
        throw new InvalidArgumentError(`${what} takes a pid`);
    return pid;
}
/** The bytes of a `stdout` event: `data_b64` when present, else the text as UTF-8. */
function frameBytes(frame) {
    if (typeof frame.data_b64 === 'string') {
        const b = Buffer.from(frame.data_b64, 'base64');
        return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    }
    return new TextEncoder().encode(frame.text ?? '');
}
/**
 * Read the rest of a terminal's event stream (after `start`), calling `onData` with each chunk.
 * Resolves to the `end` event; throws when the stream breaks or ends without one.
 */
async function pump(frames, onData, signal) {
    const callbacks = new Callbacks();
    let end;
    try {
        for (;;) {
            const { value: frame, done } = await frames.next();
            if (done)
                break;
            if (frame.type === 'stdout' || frame.type === 'stderr') {
                if (typeof onData === 'function')
                    await callbacks.call(onData, frameBytes(frame));
            }
            else if (frame.type === 'end') {
                end = frame;
            } // other event types are ignored
        }
    }
    catch (err) {
        await frames.return?.().catch(() => { });
        throw streamError(err, callbacks, signal, "while reading the terminal's output");
    }
    if (!end) {
        throw new SandboxError("the terminal's stream ended before its `end` event (the server or sandbox went away)", {
            code: 'stream_ended',
        });
    }
    return end;
}
/** Wait for the `start` event of a fresh stream: its pid. */
async function firstPid(frames) {
    for (;;) {
        const { value: frame, done } = await frames.next();
        if (done) {
            throw new SandboxError('the terminal stream ended before its `start` event', { code: 'stream_ended' });
        }
        if (frame.type === 'start')
            return frame.pid;
    }
}
/** A running (or finished) terminal: from `pty.create(…)` or `pty.connect(pid)`. */
export class PtyHandle {
    /** @internal */
    constructor(pty, pid, frames, opts) {
        this.pid = pid;
        Object.defineProperty(this, '_pty', { value: pty });
        Object.defineProperty(this, '_end', { value: undefined, writable: true });
        // Settles to `{ end }` or `{ error }`: never rejects, so an unawaited handle is harmless.
        Object.defineProperty(this, '_done', {
            value: pump(frames, opts.onData, opts.signal).then((end) => {
                this._end = end;
                return { end };
            }, (error) => ({ error })),
        });
    }
    /** The exit status once it ended, `undefined` while it runs. */
    get exitCode() {
        return this._end ? exitCodeOf(this._end) : undefined;
    }
    /** Wait for the program to end. A non-zero exit or a signal resolves too (it does not throw). */
    async wait() {
        const done = await this._done;
        if (done.end === undefined)
            throw done.error;
        const { end } = done;
        return {
            pid: this.pid,
            exitCode: exitCodeOf(end),
            ...(end.signal ? { signal: end.signal } : {}),
            timedOut: Boolean(end.timed_out),
            durationMs: end.duration_ms ?? 0,
        };
    }
    /** Type into the terminal: text (sent as UTF-8) or bytes; `\r` is Enter. */
    sendInput(data) {
        return this._pty.sendInput(this.pid, data);
    }
    /** Change the terminal size (the program gets SIGWINCH). */
    resize(size) {
        return this._pty.resize(this.pid, size);
    }
    /** SIGKILL the terminal's process group: `true` if it was running. */
    kill() {
        return this._pty.kill(this.pid);
    }
}
/** `sandbox.pty`: interactive terminals. */
export class Pty extends SandboxNamespace {
    /** @internal */
    get _base() {
        return this._sandbox._base;
    }
    /** Start a program (default `bash -i`) on a new pseudo-terminal: resolves once it exists. */
    async create(opts) {
        const o = opts === undefined ? {} : opts;
        if (!isPlainObject(o))
            throw new InvalidArgumentError('pty.create takes { cols, rows, onData, … }');
        const body = checkSize(o, 'pty.create');
        if (o.cmd !== undefined && o.cmd !== null) {
            if (typeof o.cmd !== 'string' || !o.cmd.trim())
                throw new InvalidArgumentError('pty.create: cmd must be a non-empty string');
            body.cmd = o.cmd;
        }
        if (o.cwd !== undefined && o.cwd !== null)
            body.cwd = String(o.cwd);
        const env = envMap(o.envs ?? o.env);
        if (env)
            body.env = env;
        const timeoutMs = positiveMs(o.timeoutMs, 'timeoutMs');
        if (timeoutMs !== undefined)
            body.timeout_ms = timeoutMs;
        if (o.user !== undefined)
            body.user = o.user;
        if (o.tag !== undefined)
            body.tag = o.tag;
        if (o.onData !== undefined && typeof o.onData !== 'function') {
            throw new InvalidArgumentError('pty.create: onData must be a function');
        }
        const { res } = await this._http.send('POST', `${this._base}/pty`, {
            body,
            accept: NDJSON,
            signal: opts.signal,
            timeoutMs: null,
        });
        return this._handle(res, opts);
    }
    /** Reattach to a terminal's output (what is still buffered is replayed first). */
    async connect(pid, opts = {}) {
        checkPid(pid, 'pty.connect');
        const { res } = await this._http.send('GET', `${this._base}/commands/${enc(String(pid))}/stream?base64=true`, {
            accept: NDJSON,
            signal: opts.signal,
            timeoutMs: null,
        });
        return this._handle(res, opts);
    }
    /** @internal */
    async _handle(body, opts) {
        const frames = ndjsonFrames(body);
        let pid;
        try {
            pid = await firstPid(frames);
        }
        catch (err) {
            await frames.return?.().catch(() => { });
            if (err instanceof LizardError)
                throw err;
            if (opts.signal?.aborted && err === opts.signal.reason)
                throw err;
            throw new ConnectionError(`the connection broke while starting the terminal: ${messageOf(err)}`, { cause: err });
        }
        return new PtyHandle(this, pid, frames, opts);
    }
    /** Type into a terminal. */
    async sendInput(pid, data) {
        checkPid(pid, 'pty.sendInput');
        await this._http.json('POST', `${this._base}/pty/${enc(String(pid))}/input`, inputBody(data, 'pty input'));
    }
    /** Change a terminal's size. */
    async resize(pid, size) {
        checkPid(pid, 'pty.resize');
        await this._http.json('POST', `${this._base}/pty/${enc(String(pid))}/resize`, checkSize(size, 'pty.resize'));
    }
    /** SIGKILL a terminal's process group: `true` if it was killed, `false` if there is no such process. */
    async kill(pid) {
        checkPid(pid, 'pty.kill');
        try {
            await this._http.json('POST', `${this._base}/commands/${enc(String(pid))}/signal`, { signal: 'SIGKILL' });
            return true;
        }
        catch (err) {
            if (err instanceof NotFoundError)
                return false;
            throw err;
        }
    }
}
