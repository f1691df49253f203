import { SandboxNamespace } from './commands.js';
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
/** A running (or finished) terminal: from `pty.create(…)` or `pty.connect(pid)`. */
export declare class PtyHandle {
    readonly pid: number;
    /** The exit status once it ended, `undefined` while it runs. */
    get exitCode(): number | undefined;
    /** Wait for the program to end. A non-zero exit or a signal resolves too (it does not throw). */
    wait(): Promise<PtyResult>;
    /** Type into the terminal: text (sent as UTF-8) or bytes; `\r` is Enter. */
    sendInput(data: string | Uint8Array): Promise<void>;
    /** Change the terminal size (the program gets SIGWINCH). */
    resize(size: PtySize): Promise<void>;
    /** SIGKILL the terminal's process group: `true` if it was running. */
    kill(): Promise<boolean>;
}
/** `sandbox.pty`: interactive terminals. */
export declare class Pty extends SandboxNamespace {
    /** Start a program (default `bash -i`) on a new pseudo-terminal: resolves once it exists. */
    create(opts: PtyCreateOptions): Promise<PtyHandle>;
    /** Reattach to a terminal's output (what is still buffered is replayed first). */
    connect(pid: number, opts?: {
        onData?: (data: Uint8Array) => unknown;
        signal?: AbortSignal;
    }): Promise<PtyHandle>;
    /** Type into a terminal. */
    sendInput(pid: number, data: string | Uint8Array): Promise<void>;
    /** Change a terminal's size. */
    resize(pid: number, size: PtySize): Promise<void>;
    /** SIGKILL a terminal's process group: `true` if it was killed, `false` if there is no such process. */
    kill(pid: number): Promise<boolean>;
}
