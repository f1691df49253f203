// `sandbox.commands`: processes started in the sandbox besides kernels (E2B-style `run`, `list`,
// `connect`, `kill`), over the server's `/v1/sandboxes/{id}/commands` routes. Wire types are the
// server's (crates/lizard-proto/src/command.rs), converted to camelCase by convert.ts.
import { NDJSON, messageOf, ndjsonFrames, prop } from './http.js';
import { toProcessInfo } from './convert.js';
import { CommandExitError, ConnectionError, InvalidArgumentError, LizardError, NotFoundError, SandboxError, TimeoutError, } from './errors.js';
const enc = encodeURIComponent;
/** Signal numbers of the names the agent reports, for `exitCode = 128 + n`. */
const SIGNALS = {
    SIGHUP: 1,
    SIGINT: 2,
    SIGQUIT: 3,
    SIGABRT: 6,
    SIGKILL: 9,
    SIGUSR1: 10,
    SIGSEGV: 11,
    SIGUSR2: 12,
    SIGPIPE: 13,
    SIGALRM: 14,
    SIGTERM: 15,
};
function isPlainObject(v) {
    return v !== null && typeof v === 'object' && !Array.isArray(v);
}
export function envMap(value) {
    if (value === undefined || value === null)
        return undefined;
    if (!isPlainObject(value))
        throw new InvalidArgumentError('envs must be an object of strings');
    const out = {};
    for (const [k, v] of Object.entries(value))
        if (v !== undefined)
            out[k] = String(v);
    return Object.keys(out).length ? out : undefined;
}
export function positiveMs(value, what) {
    if (value === undefined || value === null)
        return undefined;
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
        throw new InvalidArgumentError(`${what} must be a positive number of milliseconds`);
    }
    return Math.ceil(value);
}
/** Call a user callback; await it when it returns a promise, so callbacks run in frame order. */
export async function callback(fn, ...args) {
    if (typeof fn !== 'function')
        return;
    const r = fn(...args);
    if (r && typeof r.then === 'function')
        await r;
}
/**
 * The user callbacks of one stream: `call` runs one (see {@link callback}) and `failed` remembers
 * that one threw, so the stream's reader rethrows that error as is (see {@link streamError}).
 */
export class Callbacks {
    constructor() {
        this.failed = false;
    }
    async call(fn, ...args) {
        try {
            await callback(fn, ...args);
        }
        catch (err) {
            this.failed = true;
            throw err;
        }
    }
}
/**
 * What a stream's reader throws for `err`, which broke off its reading: a callback's own error, a
 * `LizardError` and the caller's abort reason as they are; with `timedOut`, a fetch timeout as a
 * `TimeoutError` of that message; anything else as a `ConnectionError` (the connection broke `during`).
 */
export function streamError(err, callbacks, signal, during, timedOut) {
    if (callbacks.failed || err instanceof LizardError)
        return err;
    if (signal?.aborted && err === signal.reason)
        return err;
    if (timedOut !== undefined && prop(err, 'name') === 'TimeoutError')
        return new TimeoutError(timedOut, { cause: err });
    return new ConnectionError(`the connection broke ${during}: ${messageOf(err)}`, { cause: err });
}
/** The exit status an `end` event stands for: `exit_code`, or 128 + the signal's number. */
export function exitCodeOf(end) {
    if (end.exit_code !== undefined && end.exit_code !== null)
        return end.exit_code;
    if (end.signal)
        return 128 + (SIGNALS[end.signal] ?? SIGNALS[`SIG${end.signal}`] ?? 0);
    return -1;
}
/** Accumulates a command's events into a {@link CommandResult}. */
class Fold {
    constructor() {
        this.pid = undefined;
        this.stdout = '';
        this.stderr = '';
        this.end = undefined;
    }
    result() {
        const e = this.end ?? {};
        return {
            // (undefined only for a stream without `start`, which ends in an error before this)
            pid: this.pid,
            exitCode: this.end ? exitCodeOf(e) : -1,
            stdout: this.stdout,
            stderr: this.stderr,
            ...(e.signal ? { signal: e.signal } : {}),
            timedOut: Boolean(e.timed_out),
            durationMs: e.duration_ms ?? 0,
        };
    }
}
function text(frame) {
    return frame.text ?? '';
}
/**
 * Read a command event stream to its end, calling the callbacks in order. `onStart(pid)` is called
 * at the `start` event. Resolves to the fold; throws when the stream breaks or ends without `end`.
 */
async function consume(body, opts, fold, onStart) {
    const callbacks = new Callbacks();
    try {
        for await (const frame of ndjsonFrames(body)) {
            switch (frame.type) {
                case 'start':
                    fold.pid = frame.pid;
                    await callbacks.call(onStart, frame.pid);
                    break;
                case 'stdout':
                    fold.stdout += text(frame);
                    await callbacks.call(opts.onStdout, text(frame));
                    break;
                case 'stderr':
                    fold.stderr += text(frame);
                    await callbacks.call(opts.onStderr, text(frame));
                    break;
                case 'end':
                    fold.end = frame;
                    break;
                default:
                    break; // unknown event types are ignored
            }
        }
    }
    catch (err) {
        throw streamError(err, callbacks, opts.signal, "while reading the command's output");
    }
    if (!fold.end) {
        throw new SandboxError("the command's stream ended before its `end` event (the server or sandbox went away)", {
            code: 'stream_ended',
        });
    }
    return fold;
}
/**
 * The text or bytes of `data` as the body of a process's input (stdin, a terminal's keystrokes);
 * `what` names it in the `InvalidArgumentError` for anything else.
 */
export function inputBody(data, what) {
    if (typeof data === 'string')
        return { data };
    if (data instanceof Uint8Array)
        return { data_b64: Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64') };
    if (data instanceof ArrayBuffer)
        return { data_b64: Buffer.from(data).toString('base64') };
    throw new InvalidArgumentError(`${what} must be a string or a Uint8Array`);
}
/** A running (or finished) command: from `commands.run(…, { background: true })` or `commands.connect(pid)`. */
export class CommandHandle {
    /** @internal */
    constructor(commands, pid, body, opts, command) {
        this.pid = pid;
        Object.defineProperty(this, '_commands', { value: commands });
        Object.defineProperty(this, '_command', { value: command });
        const fold = new Fold();
        fold.pid = pid;
        Object.defineProperty(this, '_fold', { value: fold });
        // Settles to `{ result }` or `{ error }`: never rejects, so an unawaited handle is harmless.
        Object.defineProperty(this, '_done', {
            value: consume(body, opts, fold).then((f) => ({ result: f.result() }), (error) => ({ error })),
        });
    }
    /** Output received so far. */
    get stdout() {
        return this._fold.stdout;
    }
    get stderr() {
        return this._fold.stderr;
    }
    /** The exit status once it ended, `undefined` while it runs. */
    get exitCode() {
        return this._fold.end ? exitCodeOf(this._fold.end) : undefined;
    }
    /** Wait for the end: the result, or a `CommandExitError` on a non-zero exit or a signal. */
    async wait() {
        const done = await this._done;
        if (done.error !== undefined || done.result === undefined)
            throw done.error;
        const { result } = done;
        if (result.exitCode !== 0)
            throw new CommandExitError(result, this._command);
        return result;
    }
    /** SIGKILL the command's process group: `true` if it was running. */
    kill() {
        return this._commands.kill(this.pid);
    }
    /** Write to stdin (the command must have been started with `stdin: true`). */
    sendStdin(data) {
        return this._commands.sendStdin(this.pid, data);
    }
    /** Close stdin (end of input). */
    closeStdin() {
        return this._commands.closeStdin(this.pid);
    }
}
/**
 * What `sandbox.commands`, `sandbox.files` and `sandbox.pty` share: the sandbox they act on (kept
 * as a non-enumerable property) and its HTTP client.
 */
export class SandboxNamespace {
    /** @internal */
    constructor(sandbox) {
        Object.defineProperty(this, '_sandbox', { value: sandbox });
    }
    /** @internal */
    get _http() {
        return this._sandbox._http;
    }
}
/** `sandbox.commands`: shell commands and other processes of the sandbox. */
export class Commands extends SandboxNamespace {
    /** @internal */
    get _base() {
        return `${this._sandbox._base}/commands`;
    }
    async run(cmd, opts = {}) {
        if (typeof cmd !== 'string' || !cmd)
            throw new InvalidArgumentError('commands.run takes the command as a string');
        if (!isPlainObject(opts))
            throw new InvalidArgumentError('commands.run options must be an object');
        const { fold, timeoutMs } = await this._start(cmd, opts);
        if (fold instanceof CommandHandle)
            return fold;
        const result = fold.result();
        if (result.timedOut) {
            const t = new TimeoutError(`command timed out after ${timeoutMs} ms: ${cmd}`);
            t.result = result;
            throw t;
        }
        if (result.exitCode !== 0)
            throw new CommandExitError(result, cmd);
        return result;
    }
    /**
     * @internal
     * Start a command: for `background`, a handle; otherwise the fold of its whole stream. Shared by
     * `run` and `CodeSandbox.exec` (which does not throw on a non-zero exit).
     */
    async _start(cmd, opts) {
        const body = { cmd };
        if (opts.cwd !== undefined && opts.cwd !== null)
            body.cwd = String(opts.cwd);
        const env = envMap(opts.envs ?? opts.env);
        if (env)
            body.env = env;
        const timeoutMs = positiveMs(opts.timeoutMs, 'timeoutMs');
        if (timeoutMs !== undefined)
            body.timeout_ms = timeoutMs;
        const stdinData = opts.stdin !== undefined && opts.stdin !== null && opts.stdin !== false && opts.stdin !== true
            ? inputBody(opts.stdin, 'stdin data')
            : undefined;
        if (opts.stdin !== undefined && opts.stdin !== null && opts.stdin !== false)
            body.stdin = true;
        if (opts.user !== undefined)
            body.user = opts.user;
        if (opts.tag !== undefined)
            body.tag = opts.tag;
        if (opts.background) {
            body.background = true;
            const info = (await this._http.json('POST', this._base, body));
            const handle = await this._connect(info.pid, opts, cmd);
            if (stdinData) {
                await this._http.json('POST', `${this._base}/${info.pid}/stdin`, stdinData);
                await this.closeStdin(info.pid);
            }
            return { fold: handle, timeoutMs };
        }
        const { res } = await this._http.send('POST', this._base, {
            body,
            accept: NDJSON,
            signal: opts.signal,
            timeoutMs: opts.requestTimeoutMs ?? null,
        });
        const fold = new Fold();
        // Given data for stdin: write it as soon as the process exists, then close the pipe.
        const onStart = stdinData
            ? async (pid) => {
                await this._http.json('POST', `${this._base}/${pid}/stdin`, stdinData);
                await this.closeStdin(pid);
            }
            : undefined;
        await consume(res, opts, fold, onStart);
        return { fold, timeoutMs };
    }
    /** @internal */
    async _connect(pid, opts, command) {
        const { res } = await this._http.send('GET', `${this._base}/${enc(String(pid))}/stream`, {
            accept: NDJSON,
            signal: opts.signal,
            timeoutMs: null,
        });
        return new CommandHandle(this, pid, res, opts, command);
    }
    /** Running processes, and those that ended in the last 60 s. */
    async list() {
        const list = (await this._http.json('GET', this._base));
        return list.map(toProcessInfo);
    }
    /** Reattach to a process's output (what is still buffered is replayed first). */
    async connect(pid, opts = {}) {
        if (!Number.isInteger(pid) || pid <= 0)
            throw new InvalidArgumentError('commands.connect takes a pid');
        return this._connect(pid, opts);
    }
    /** SIGKILL a process's group: `true` if it was killed, `false` if there is no such process. */
    async kill(pid) {
        try {
            await this._http.json('POST', `${this._base}/${enc(String(pid))}/signal`, { signal: 'SIGKILL' });
            return true;
        }
        catch (err) {
            if (err instanceof NotFoundError)
                return false;
            throw err;
        }
    }
    /** Write to a process's stdin. */
    async sendStdin(pid, data) {
        await this._http.json('POST', `${this._base}/${enc(String(pid))}/stdin`, inputBody(data, 'stdin data'));
    }
    /** Close a process's stdin. */
    async closeStdin(pid) {
        await this._http.json('POST', `${this._base}/${enc(String(pid))}/stdin/close`);
    }
}
