// `sandbox.commands`: processes started in the sandbox besides kernels (E2B-style `run`, `list`,
// `connect`, `kill`), over the server's `/v1/sandboxes/{id}/commands` routes. Wire types are the
// server's (crates/lizard-proto/src/command.rs), converted to camelCase by convert.ts.

import { NDJSON, messageOf, ndjsonFrames, prop } from './http.js';
import type { Frame, HttpClient, Reply } from './http.js';
import { toProcessInfo } from './convert.js';
import {
  CommandExitError,
  ConnectionError,
  InvalidArgumentError,
  LizardError,
  NotFoundError,
  SandboxError,
  TimeoutError,
} from './errors.js';
import type { CodeSandbox } from './sandbox.js';
import type { components } from './wire.js';

type W = components['schemas'];

const enc = encodeURIComponent;

/** Signal numbers of the names the agent reports, for `exitCode = 128 + n`. */
const SIGNALS: Record<string, number> = {
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

// ---- commands ------------------------------------------------------------------------------------

/** Options of {@link Commands.run}. */
export interface CommandStartOptions {
  /** Working directory; relative paths start at `/home/user` (the default). */
  cwd?: string;
  /** Environment variables, merged over the sandbox's. */
  envs?: Record<string, string>;
  /** The server stops the process group after this many ms (SIGTERM, then SIGKILL). */
  timeoutMs?: number;
  /** Each stdout chunk as it arrives (chunks are not lines). */
  onStdout?: (text: string) => unknown;
  /** Each stderr chunk as it arrives. */
  onStderr?: (text: string) => unknown;
  /**
   * `true`: keep a stdin pipe open for `sendStdin` (background commands). A string or bytes: written
   * to the command's stdin as soon as it starts, then stdin is closed.
   */
  stdin?: boolean | string | Uint8Array;
  /** The user to run as; only `user` exists. */
  user?: string;
  /** A free-form label shown by `commands.list()`. */
  tag?: string;
  /** Abort: the client stops reading the output. */
  signal?: AbortSignal;
  /** Client-side deadline of a foreground command's whole streamed request, in ms. Default: none. */
  requestTimeoutMs?: number;
}

/** A finished command. */
export interface CommandResult {
  pid: number;
  /** The exit status; 128 + the signal's number when a signal killed it. */
  exitCode: number;
  /** All output, as (lossy UTF-8) text. */
  stdout: string;
  stderr: string;
  /** The signal that killed it (e.g. `SIGKILL`), when one did. */
  signal?: string;
  /** `timeoutMs` passed and the server stopped it. */
  timedOut: boolean;
  /** Server-side time from start to exit. */
  durationMs: number;
}

/** How a process ended. */
export interface ProcessEnd {
  exitCode?: number;
  signal?: string;
  timedOut: boolean;
  durationMs: number;
}

/** A process as `commands.list()` reports it. */
export interface ProcessInfo {
  pid: number;
  /** The shell command line, when started with one. */
  cmd?: string;
  /** What was executed, e.g. `['/usr/bin/bash', '-c', 'echo hi']`. */
  argv: string[];
  cwd: string;
  /** The request's environment variables (not the inherited ones). */
  envs: Record<string, string>;
  tag?: string;
  /** The terminal size, for a PTY process. */
  pty?: { cols: number; rows: number };
  /** Whether it has a stdin pipe. */
  stdin: boolean;
  /** Milliseconds since the Unix epoch. */
  startedAtMs: number;
  /** How it ended; absent while it runs (finished processes stay listed for 60 s). */
  end?: ProcessEnd;
}

/** The options of `commands.connect` (and what a background run passes on). */
interface StreamOptions {
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
  signal?: AbortSignal;
}

function isPlainObject<T>(v: T): v is T & Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

export function envMap(value: unknown): Record<string, string> | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isPlainObject(value)) throw new InvalidArgumentError('envs must be an object of strings');
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k] = String(v);
  return Object.keys(out).length ? out : undefined;
}

export function positiveMs(value: unknown, what: string): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidArgumentError(`${what} must be a positive number of milliseconds`);
  }
  return Math.ceil(value);
}

/** Call a user callback; await it when it returns a promise, so callbacks run in frame order. */
export async function callback<A extends unknown[]>(fn: ((...args: A) => unknown) | undefined, ...args: A): Promise<void> {
  if (typeof fn !== 'function') return;
  const r: unknown = fn(...args);
  if (r && typeof (r as { then?: unknown }).then === 'function') await r;
}

/**
 * The user callbacks of one stream: `call` runs one (see {@link callback}) and `failed` remembers
 * that one threw, so the stream's reader rethrows that error as is (see {@link streamError}).
 */
export class Callbacks {
  failed = false;

  async call<A extends unknown[]>(fn: ((...args: A) => unknown) | undefined, ...args: A): Promise<void> {
    try {
      await callback(fn, ...args);
    } catch (err) {
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
export function streamError(
  err: unknown,
  callbacks: Callbacks,
  signal: AbortSignal | undefined,
  during: string,
  timedOut?: string,
): unknown {
  if (callbacks.failed || err instanceof LizardError) return err;
  if (signal?.aborted && err === signal.reason) return err;
  if (timedOut !== undefined && prop(err, 'name') === 'TimeoutError') return new TimeoutError(timedOut, { cause: err });
  return new ConnectionError(`the connection broke ${during}: ${messageOf(err)}`, { cause: err });
}

/** The end of a process's stream, as the server sends it. */
export type WireEnd = Partial<W['CommandEnd']>;

/** The exit status an `end` event stands for: `exit_code`, or 128 + the signal's number. */
export function exitCodeOf(end: WireEnd): number {
  if (end.exit_code !== undefined && end.exit_code !== null) return end.exit_code;
  if (end.signal) return 128 + (SIGNALS[end.signal] ?? SIGNALS[`SIG${end.signal}`] ?? 0);
  return -1;
}

/** Accumulates a command's events into a {@link CommandResult}. */
class Fold {
  pid: number | undefined = undefined;
  stdout = '';
  stderr = '';
  end: WireEnd | undefined = undefined;

  result(): CommandResult {
    const e: WireEnd = this.end ?? {};
    return {
      // (undefined only for a stream without `start`, which ends in an error before this)
      pid: this.pid as number,
      exitCode: this.end ? exitCodeOf(e) : -1,
      stdout: this.stdout,
      stderr: this.stderr,
      ...(e.signal ? { signal: e.signal } : {}),
      timedOut: Boolean(e.timed_out),
      durationMs: e.duration_ms ?? 0,
    };
  }
}

function text(frame: Frame): string {
  return (frame.text as string | undefined) ?? '';
}

/**
 * Read a command event stream to its end, calling the callbacks in order. `onStart(pid)` is called
 * at the `start` event. Resolves to the fold; throws when the stream breaks or ends without `end`.
 */
async function consume(
  body: Reply,
  opts: StreamOptions,
  fold: Fold,
  onStart?: (pid: number) => unknown,
): Promise<Fold> {
  const callbacks = new Callbacks();
  try {
    for await (const frame of ndjsonFrames(body)) {
      switch (frame.type) {
        case 'start':
          fold.pid = frame.pid as number;
          await callbacks.call(onStart, frame.pid as number);
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
          fold.end = frame as WireEnd;
          break;
        default:
          break; // unknown event types are ignored
      }
    }
  } catch (err) {
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
export function inputBody(data: unknown, what: string): { data: string } | { data_b64: string } {
  if (typeof data === 'string') return { data };
  if (data instanceof Uint8Array) return { data_b64: Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64') };
  if (data instanceof ArrayBuffer) return { data_b64: Buffer.from(data).toString('base64') };
  throw new InvalidArgumentError(`${what} must be a string or a Uint8Array`);
}

/** A running (or finished) command: from `commands.run(…, { background: true })` or `commands.connect(pid)`. */
export class CommandHandle {
  readonly pid: number;
  /** @internal */
  declare private readonly _commands: Commands;
  /** @internal */
  declare private readonly _command: string | undefined;
  /** @internal */
  declare private readonly _fold: Fold;
  /** @internal */
  declare private readonly _done: Promise<{ result: CommandResult; error?: undefined } | { error: unknown; result?: undefined }>;

  /** @internal */
  constructor(commands: Commands, pid: number, body: Reply, opts: StreamOptions, command?: string) {
    this.pid = pid;
    Object.defineProperty(this, '_commands', { value: commands });
    Object.defineProperty(this, '_command', { value: command });
    const fold = new Fold();
    fold.pid = pid;
    Object.defineProperty(this, '_fold', { value: fold });
    // Settles to `{ result }` or `{ error }`: never rejects, so an unawaited handle is harmless.
    Object.defineProperty(this, '_done', {
      value: consume(body, opts, fold).then(
        (f) => ({ result: f.result() }),
        (error: unknown) => ({ error }),
      ),
    });
  }

  /** Output received so far. */
  get stdout(): string {
    return this._fold.stdout;
  }

  get stderr(): string {
    return this._fold.stderr;
  }

  /** The exit status once it ended, `undefined` while it runs. */
  get exitCode(): number | undefined {
    return this._fold.end ? exitCodeOf(this._fold.end) : undefined;
  }

  /** Wait for the end: the result, or a `CommandExitError` on a non-zero exit or a signal. */
  async wait(): Promise<CommandResult> {
    const done = await this._done;
    if (done.error !== undefined || done.result === undefined) throw done.error;
    const { result } = done;
    if (result.exitCode !== 0) throw new CommandExitError(result, this._command);
    return result;
  }

  /** SIGKILL the command's process group: `true` if it was running. */
  kill(): Promise<boolean> {
    return this._commands.kill(this.pid);
  }

  /** Write to stdin (the command must have been started with `stdin: true`). */
  sendStdin(data: string | Uint8Array): Promise<void> {
    return this._commands.sendStdin(this.pid, data);
  }

  /** Close stdin (end of input). */
  closeStdin(): Promise<void> {
    return this._commands.closeStdin(this.pid);
  }
}

/**
 * What `sandbox.commands`, `sandbox.files` and `sandbox.pty` share: the sandbox they act on (kept
 * as a non-enumerable property) and its HTTP client.
 */
export class SandboxNamespace {
  /** @internal */
  declare protected readonly _sandbox: CodeSandbox;

  /** @internal */
  constructor(sandbox: CodeSandbox) {
    Object.defineProperty(this, '_sandbox', { value: sandbox });
  }

  /** @internal */
  protected get _http(): HttpClient {
    return this._sandbox._http;
  }
}

/** `sandbox.commands`: shell commands and other processes of the sandbox. */
export class Commands extends SandboxNamespace {
  /** @internal */
  private get _base(): string {
    return `${this._sandbox._base}/commands`;
  }

  /**
   * Run `bash -c cmd` and wait for it: resolves to `{ exitCode, stdout, stderr, … }`; a non-zero exit
   * throws a {@link CommandExitError} (with `.result`), a `timeoutMs` stop a `TimeoutError` (with `.result`).
   */
  run(cmd: string, opts?: CommandStartOptions & { background?: false }): Promise<CommandResult>;
  /** Start `bash -c cmd` in the background: resolves to a handle as soon as the process exists. */
  run(cmd: string, opts: CommandStartOptions & { background: true }): Promise<CommandHandle>;
  async run(cmd: string, opts: CommandStartOptions & { background?: boolean } = {}): Promise<CommandResult | CommandHandle> {
    if (typeof cmd !== 'string' || !cmd) throw new InvalidArgumentError('commands.run takes the command as a string');
    if (!isPlainObject(opts)) throw new InvalidArgumentError('commands.run options must be an object');
    const { fold, timeoutMs } = await this._start(cmd, opts);
    if (fold instanceof CommandHandle) return fold;
    const result = fold.result();
    if (result.timedOut) {
      const t = new TimeoutError(`command timed out after ${timeoutMs} ms: ${cmd}`);
      t.result = result;
      throw t;
    }
    if (result.exitCode !== 0) throw new CommandExitError(result, cmd);
    return result;
  }

  /**
   * @internal
   * Start a command: for `background`, a handle; otherwise the fold of its whole stream. Shared by
   * `run` and `CodeSandbox.exec` (which does not throw on a non-zero exit).
   */
  async _start(
    cmd: string,
    opts: Omit<CommandStartOptions, 'envs'> & { envs?: unknown; env?: unknown; background?: boolean },
  ): Promise<{ fold: Fold | CommandHandle; timeoutMs: number | undefined }> {
    const body: Record<string, unknown> = { cmd };
    if (opts.cwd !== undefined && opts.cwd !== null) body.cwd = String(opts.cwd);
    const env = envMap(opts.envs ?? opts.env);
    if (env) body.env = env;
    const timeoutMs = positiveMs(opts.timeoutMs, 'timeoutMs');
    if (timeoutMs !== undefined) body.timeout_ms = timeoutMs;
    const stdinData = opts.stdin !== undefined && opts.stdin !== null && opts.stdin !== false && opts.stdin !== true
      ? inputBody(opts.stdin, 'stdin data')
      : undefined;
    if (opts.stdin !== undefined && opts.stdin !== null && opts.stdin !== false) body.stdin = true;
    if (opts.user !== undefined) body.user = opts.user;
    if (opts.tag !== undefined) body.tag = opts.tag;

    if (opts.background) {
      body.background = true;
      const info = (await this._http.json('POST', this._base, body)) as W['ProcessInfo'];
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
      ? async (pid: number) => {
          await this._http.json('POST', `${this._base}/${pid}/stdin`, stdinData);
          await this.closeStdin(pid);
        }
      : undefined;
    await consume(res, opts, fold, onStart);
    return { fold, timeoutMs };
  }

  /** @internal */
  private async _connect(pid: number, opts: StreamOptions, command?: string): Promise<CommandHandle> {
    const { res } = await this._http.send('GET', `${this._base}/${enc(String(pid))}/stream`, {
      accept: NDJSON,
      signal: opts.signal,
      timeoutMs: null,
    });
    return new CommandHandle(this, pid, res, opts, command);
  }

  /** Running processes, and those that ended in the last 60 s. */
  async list(): Promise<ProcessInfo[]> {
    const list = (await this._http.json('GET', this._base)) as W['ProcessInfo'][];
    return list.map(toProcessInfo);
  }

  /** Reattach to a process's output (what is still buffered is replayed first). */
  async connect(
    pid: number,
    opts: { onStdout?: (text: string) => unknown; onStderr?: (text: string) => unknown; signal?: AbortSignal } = {},
  ): Promise<CommandHandle> {
    if (!Number.isInteger(pid) || pid <= 0) throw new InvalidArgumentError('commands.connect takes a pid');
    return this._connect(pid, opts);
  }

  /** SIGKILL a process's group: `true` if it was killed, `false` if there is no such process. */
  async kill(pid: number): Promise<boolean> {
    try {
      await this._http.json('POST', `${this._base}/${enc(String(pid))}/signal`, { signal: 'SIGKILL' });
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /** Write to a process's stdin. */
  async sendStdin(pid: number, data: string | Uint8Array): Promise<void> {
    await this._http.json('POST', `${this._base}/${enc(String(pid))}/stdin`, inputBody(data, 'stdin data'));
  }

  /** Close a process's stdin. */
  async closeStdin(pid: number): Promise<void> {
    await this._http.json('POST', `${this._base}/${enc(String(pid))}/stdin/close`);
  }
}

