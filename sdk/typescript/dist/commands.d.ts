import type { components } from './wire.js';
type W = components['schemas'];
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
    pty?: {
        cols: number;
        rows: number;
    };
    /** Whether it has a stdin pipe. */
    stdin: boolean;
    /** Milliseconds since the Unix epoch. */
    startedAtMs: number;
    /** How it ended; absent while it runs (finished processes stay listed for 60 s). */
    end?: ProcessEnd;
}
export declare function envMap(value: unknown): Record<string, string> | undefined;
export declare function positiveMs(value: unknown, what: string): number | undefined;
/** Call a user callback; await it when it returns a promise, so callbacks run in frame order. */
export declare function callback<A extends unknown[]>(fn: ((...args: A) => unknown) | undefined, ...args: A): Promise<void>;
/**
 * The user callbacks of one stream: `call` runs one (see {@link callback}) and `failed` remembers
 * that one threw, so the stream's reader rethrows that error as is (see {@link streamError}).
 */
export declare class Callbacks {
    failed: boolean;
    call<A extends unknown[]>(fn: ((...args: A) => unknown) | undefined, ...args: A): Promise<void>;
}
/**
 * What a stream's reader throws for `err`, which broke off its reading: a callback's own error, a
 * `LizardError` and the caller's abort reason as they are; with `timedOut`, a fetch timeout as a
 * `TimeoutError` of that message; anything else as a `ConnectionError` (the connection broke `during`).
 */
export declare function streamError(err: unknown, callbacks: Callbacks, signal: AbortSignal | undefined, during: string, timedOut?: string): unknown;
/** The end of a process's stream, as the server sends it. */
export type WireEnd = Partial<W['CommandEnd']>;
/** The exit status an `end` event stands for: `exit_code`, or 128 + the signal's number. */
export declare function exitCodeOf(end: WireEnd): number;
/**
 * The text or bytes of `data` as the body of a process's input (stdin, a terminal's keystrokes);
 * `what` names it in the `InvalidArgumentError` for anything else.
 */
export declare function inputBody(data: unknown, what: string): {
    data: string;
} | {
    data_b64: string;
};
/** A running (or finished) command: from `commands.run(…, { background: true })` or `commands.connect(pid)`. */
export declare class CommandHandle {
    readonly pid: number;
    /** Output received so far. */
    get stdout(): string;
    get stderr(): string;
    /** The exit status once it ended, `undefined` while it runs. */
    get exitCode(): number | undefined;
    /** Wait for the end: the result, or a `CommandExitError` on a non-zero exit or a signal. */
    wait(): Promise<CommandResult>;
    /** SIGKILL the command's process group: `true` if it was running. */
    kill(): Promise<boolean>;
    /** Write to stdin (the command must have been started with `stdin: true`). */
    sendStdin(data: string | Uint8Array): Promise<void>;
    /** Close stdin (end of input). */
    closeStdin(): Promise<void>;
}
/**
 * What `sandbox.commands`, `sandbox.files` and `sandbox.pty` share: the sandbox they act on (kept
 * as a non-enumerable property) and its HTTP client.
 */
export declare class SandboxNamespace {
}
/** `sandbox.commands`: shell commands and other processes of the sandbox. */
export declare class Commands extends SandboxNamespace {
    /**
     * Run `bash -c cmd` and wait for it: resolves to `{ exitCode, stdout, stderr, … }`; a non-zero exit
     * throws a {@link CommandExitError} (with `.result`), a `timeoutMs` stop a `TimeoutError` (with `.result`).
     */
    run(cmd: string, opts?: CommandStartOptions & {
        background?: false;
    }): Promise<CommandResult>;
    /** Start `bash -c cmd` in the background: resolves to a handle as soon as the process exists. */
    run(cmd: string, opts: CommandStartOptions & {
        background: true;
    }): Promise<CommandHandle>;
    /** Running processes, and those that ended in the last 60 s. */
    list(): Promise<ProcessInfo[]>;
    /** Reattach to a process's output (what is still buffered is replayed first). */
    connect(pid: number, opts?: {
        onStdout?: (text: string) => unknown;
        onStderr?: (text: string) => unknown;
        signal?: AbortSignal;
    }): Promise<CommandHandle>;
    /** SIGKILL a process's group: `true` if it was killed, `false` if there is no such process. */
    kill(pid: number): Promise<boolean>;
    /** Write to a process's stdin. */
    sendStdin(pid: number, data: string | Uint8Array): Promise<void>;
    /** Close a process's stdin. */
    closeStdin(pid: number): Promise<void>;
}
export {};
