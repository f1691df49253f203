// `sandbox.pty`: interactive terminals (E2B-style `create`, `connect`, `sendInput`, `resize`,
// `kill`) over the server's `/v1/sandboxes/{id}/pty` routes. A terminal is a process in the same
// table as commands: its output is the command event stream, the terminal's bytes arriving as
// `stdout` events that always carry `data_b64` (crates/lizard-proto/src/command.rs); killing and
// reattaching go through `/commands/{pid}/…`. Not here: terminal emulation (`onData` gets raw bytes).

import { NDJSON, messageOf, ndjsonFrames } from './http.js';
import type { Frame, Reply } from './http.js';
import { Callbacks, SandboxNamespace, envMap, exitCodeOf, inputBody, positiveMs, streamError } from './commands.js';
import type { WireEnd } from './commands.js';
import { ConnectionError, InvalidArgumentError, LizardError, NotFoundError, SandboxError } from './errors.js';

const enc = encodeURIComponent;
const MAX_CELLS = 4096;

// ---- pty -----------------------------------------------------------------------------------------

/** A terminal size in character cells (1 to 4096 each). */
export interface PtySize {
  cols: number;
  rows: number;
}

/** Options of {@link Pty.create}. */
export interface PtyCreateOptions extends PtySize {
  /** Each chunk of terminal output, as raw bytes, as it arrives (render it with a terminal emulator). */
  onData?: (data: Uint8Array) => unknown;
  /** A shell command line to run on the terminal; default: an interactive `bash -i`. */
  cmd?: string;
  /** Working directory; relative paths start at `/home/user` (the default). */
  cwd?: string;
  /** Environment variables, merged over the sandbox's; `TERM` defaults to `xterm-256color`. */
  envs?: Record<string, string>;
  /** The server stops the terminal's process group after this many ms. */
  timeoutMs?: number;
  /** The user to run as; only `user` exists. */
  user?: string;
  /** A free-form label shown by `commands.list()`. */
  tag?: string;
  /** Abort: the client stops reading the output (the terminal keeps running). */
  signal?: AbortSignal;
}

/** How a terminal's program ended. */
export interface PtyResult {
  pid: number;
  /** The exit status; 128 + the signal's number when a signal killed it. */
  exitCode: number;
  /** The signal that killed it (e.g. `SIGKILL`), when one did. */
  signal?: string;
  timedOut: boolean;
  /** Server-side time from start to exit. */
  durationMs: number;
}

/** What a terminal's stream is read with. */
interface StreamOptions {
  onData?: (data: Uint8Array) => unknown;
  signal?: AbortSignal;
}

type Frames = AsyncGenerator<Frame, void, undefined>;

function isPlainObject<T>(v: T): v is T & Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function checkSize(size: unknown, what: string): { cols: number; rows: number } & Record<string, unknown> {
  if (!isPlainObject(size)) throw new InvalidArgumentError(`${what} takes { cols, rows }`);
  const { cols, rows } = size;
  for (const [name, v] of [['cols', cols], ['rows', rows]] as const) {
    if (!Number.isInteger(v) || (v as number) < 1 || (v as number) > MAX_CELLS) {
      throw new InvalidArgumentError(`${what}: ${name} must be an integer between 1 and ${MAX_CELLS}`);
    }
  }
  return { cols: cols as number, rows: rows as number };
}

function checkPid(pid: unknown, what: string): number {
  if (!Number.isInteger(pid) || (pid as number) <= 0) throw new InvalidArgumentError(`${what} takes a pid`);
  return pid as number;
}

/** The bytes of a `stdout` event: `data_b64` when present, else the text as UTF-8. */
function frameBytes(frame: Frame): Uint8Array {
  if (typeof frame.data_b64 === 'string') {
    const b = Buffer.from(frame.data_b64, 'base64');
    return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  }
  return new TextEncoder().encode((frame.text as string | undefined) ?? '');
}

/**
 * Read the rest of a terminal's event stream (after `start`), calling `onData` with each chunk.
 * Resolves to the `end` event; throws when the stream breaks or ends without one.
 */
async function pump(frames: Frames, onData: StreamOptions['onData'], signal: AbortSignal | undefined): Promise<WireEnd> {
  const callbacks = new Callbacks();
  let end: WireEnd | undefined;
  try {
    for (;;) {
      const { value: frame, done } = await frames.next();
      if (done) break;
      if (frame.type === 'stdout' || frame.type === 'stderr') {
        if (typeof onData === 'function') await callbacks.call(onData, frameBytes(frame));
      } else if (frame.type === 'end') {
        end = frame as WireEnd;
      } // other event types are ignored
    }
  } catch (err) {
    await frames.return?.().catch(() => {});
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
async function firstPid(frames: Frames): Promise<number> {
  for (;;) {
    const { value: frame, done } = await frames.next();
    if (done) {
      throw new SandboxError('the terminal stream ended before its `start` event', { code: 'stream_ended' });
    }
    if (frame.type === 'start') return frame.pid as number;
  }
}

/** A running (or finished) terminal: from `pty.create(…)` or `pty.connect(pid)`. */
export class PtyHandle {
  readonly pid: number;
  /** @internal */
  declare private readonly _pty: Pty;
  /** @internal */
  declare private _end: WireEnd | undefined;
  /** @internal */
  declare private readonly _done: Promise<{ end: WireEnd; error?: undefined } | { error: unknown; end?: undefined }>;

  /** @internal */
  constructor(pty: Pty, pid: number, frames: Frames, opts: StreamOptions) {
    this.pid = pid;
    Object.defineProperty(this, '_pty', { value: pty });
    Object.defineProperty(this, '_end', { value: undefined, writable: true });
    // Settles to `{ end }` or `{ error }`: never rejects, so an unawaited handle is harmless.
    Object.defineProperty(this, '_done', {
      value: pump(frames, opts.onData, opts.signal).then(
        (end) => {
          this._end = end;
          return { end };
        },
        (error: unknown) => ({ error }),
      ),
    });
  }

  /** The exit status once it ended, `undefined` while it runs. */
  get exitCode(): number | undefined {
    return this._end ? exitCodeOf(this._end) : undefined;
  }

  /** Wait for the program to end. A non-zero exit or a signal resolves too (it does not throw). */
  async wait(): Promise<PtyResult> {
    const done = await this._done;
    if (done.end === undefined) throw done.error;
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
  sendInput(data: string | Uint8Array): Promise<void> {
    return this._pty.sendInput(this.pid, data);
  }

  /** Change the terminal size (the program gets SIGWINCH). */
  resize(size: PtySize): Promise<void> {
    return this._pty.resize(this.pid, size);
  }

  /** SIGKILL the terminal's process group: `true` if it was running. */
  kill(): Promise<boolean> {
    return this._pty.kill(this.pid);
  }
}

/** `sandbox.pty`: interactive terminals. */
export class Pty extends SandboxNamespace {
  /** @internal */
  private get _base(): string {
    return this._sandbox._base;
  }

  /** Start a program (default `bash -i`) on a new pseudo-terminal: resolves once it exists. */
  async create(opts: PtyCreateOptions): Promise<PtyHandle> {
    const o: unknown = opts === undefined ? {} : opts;
    if (!isPlainObject(o)) throw new InvalidArgumentError('pty.create takes { cols, rows, onData, … }');
    const body: Record<string, unknown> = checkSize(o, 'pty.create');
    if (o.cmd !== undefined && o.cmd !== null) {
      if (typeof o.cmd !== 'string' || !o.cmd.trim()) throw new InvalidArgumentError('pty.create: cmd must be a non-empty string');
      body.cmd = o.cmd;
    }
    if (o.cwd !== undefined && o.cwd !== null) body.cwd = String(o.cwd);
    const env = envMap(o.envs ?? o.env);
    if (env) body.env = env;
    const timeoutMs = positiveMs(o.timeoutMs, 'timeoutMs');
    if (timeoutMs !== undefined) body.timeout_ms = timeoutMs;
    if (o.user !== undefined) body.user = o.user;
    if (o.tag !== undefined) body.tag = o.tag;
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
  async connect(pid: number, opts: { onData?: (data: Uint8Array) => unknown; signal?: AbortSignal } = {}): Promise<PtyHandle> {
    checkPid(pid, 'pty.connect');
    const { res } = await this._http.send('GET', `${this._base}/commands/${enc(String(pid))}/stream?base64=true`, {
      accept: NDJSON,
      signal: opts.signal,
      timeoutMs: null,
    });
    return this._handle(res, opts);
  }

  /** @internal */
  private async _handle(body: Reply, opts: StreamOptions): Promise<PtyHandle> {
    const frames = ndjsonFrames(body);
    let pid: number;
    try {
      pid = await firstPid(frames);
    } catch (err) {
      await frames.return?.().catch(() => {});
      if (err instanceof LizardError) throw err;
      if (opts.signal?.aborted && err === opts.signal.reason) throw err;
      throw new ConnectionError(`the connection broke while starting the terminal: ${messageOf(err)}`, { cause: err });
    }
    return new PtyHandle(this, pid, frames, opts);
  }

  /** Type into a terminal. */
  async sendInput(pid: number, data: string | Uint8Array): Promise<void> {
    checkPid(pid, 'pty.sendInput');
    await this._http.json('POST', `${this._base}/pty/${enc(String(pid))}/input`, inputBody(data, 'pty input'));
  }

  /** Change a terminal's size. */
  async resize(pid: number, size: PtySize): Promise<void> {
    checkPid(pid, 'pty.resize');
    await this._http.json('POST', `${this._base}/pty/${enc(String(pid))}/resize`, checkSize(size, 'pty.resize'));
  }

  /** SIGKILL a terminal's process group: `true` if it was killed, `false` if there is no such process. */
  async kill(pid: number): Promise<boolean> {
    checkPid(pid, 'pty.kill');
    try {
      await this._http.json('POST', `${this._base}/commands/${enc(String(pid))}/signal`, { signal: 'SIGKILL' });
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }
}
