import type { components } from './wire.js';
type WireSchemas = components['schemas'];
/** Named formats a result can have. */
export type ResultFormat = 'text' | 'html' | 'markdown' | 'svg' | 'png' | 'jpeg' | 'pdf' | 'latex' | 'json' | 'javascript';
/**
 * Named formats and their MIME types, in the order `formats` lists them (so a matplotlib figure is
 * `['text', 'png']` and a DataFrame `['text', 'html']`).
 */
export declare const FORMAT_MIME: readonly [readonly ["text", "text/plain"], readonly ["html", "text/html"], readonly ["markdown", "text/markdown"], readonly ["svg", "image/svg+xml"], readonly ["png", "image/png"], readonly ["jpeg", "image/jpeg"], readonly ["pdf", "application/pdf"], readonly ["latex", "text/latex"], readonly ["json", "application/json"], readonly ["javascript", "application/javascript"]];
/**
 * The data behind a result, next to its display formats (not listed in `formats`): a pandas
 * DataFrame's columns (`table`) and a matplotlib figure's chart (`chart`: type, title, axes,
 * elements).
 */
export declare const DATA_MIME: readonly [readonly ["table", "application/vnd.lizard.table+json"], readonly ["chart", "application/vnd.lizard.chart+json"]];
/**
 * One rich value produced by a cell: the value of its last expression (`isMainResult`) or a
 * `display()` output (a matplotlib figure, an HTML table, …).
 */
export declare class Result {
    /** True for the value of the cell's last expression, false for `display()` output. */
    readonly isMainResult: boolean;
    /**
     * The primary textual value: `text/plain` when present (`runCode('1 + 1')` → `'2'`), else the
     * first of Markdown, HTML, LaTeX, SVG, JavaScript present, else the JSON serialized, else
     * `undefined` (an image alone: read `png`/`jpeg`).
     */
    readonly data?: string;
    /** `text/plain`. */
    readonly text?: string;
    /** `text/html` (e.g. a pandas DataFrame). */
    readonly html?: string;
    /** `text/markdown`. */
    readonly markdown?: string;
    /** `image/svg+xml`. */
    readonly svg?: string;
    /** `image/png`, base64-encoded (e.g. a matplotlib figure). */
    readonly png?: string;
    /** `image/jpeg`, base64-encoded. */
    readonly jpeg?: string;
    /** `application/pdf`, base64-encoded. */
    readonly pdf?: string;
    /** `text/latex`. */
    readonly latex?: string;
    /** `application/json`: any JSON value. */
    readonly json?: unknown;
    /** `application/javascript`. */
    readonly javascript?: string;
    /** A pandas DataFrame's data, `{column: [values…]}` (not listed in `formats`). */
    readonly table?: Record<string, unknown[]>;
    /** The chart a matplotlib figure draws: `type` (`line`, `scatter`, `bar`, `pie`,
     * `box_and_whisker`, `superchart`), `title`, axis labels/ticks and `elements` (not listed in
     * `formats`). */
    readonly chart?: Record<string, unknown>;
    /** Named formats present, in the order above (`['text', 'png']`), then other MIME types as they are. */
    readonly formats: Array<ResultFormat | (string & {})>;
    /** MIME types without a named accessor. */
    readonly extra: Record<string, unknown>;
    /** The whole MIME bundle as the server sent it. */
    readonly raw: Record<string, unknown>;
    /** Kernel-provided metadata, when any. */
    readonly metadata?: unknown;
    private constructor();
}
/**
 * A failed cell (data, not a thrown exception): a Python exception, a JavaScript throw, a Bash
 * cell that exited non-zero (`name === 'ExitCode'`, `value` is the status), `KeyboardInterrupt`,
 * `Timeout` (the run's `timeoutMs` passed) or `KernelDied` (the context got a fresh kernel).
 */
export declare class ExecutionError {
    /** Exception class name, e.g. `NameError`, `ReferenceError`, `ExitCode`, `KernelDied`. */
    readonly name: string;
    /** The exception's message. */
    readonly value: string;
    /** Same as `value`. */
    readonly message: string;
    /** The traceback as plain text (no colour codes); may be empty. */
    readonly traceback: string;
    private constructor();
    toString(): string;
}
/** One value per format: from the main result when it has it, else the last result that has it. */
export interface ExecutionOutputs {
    text?: string;
    html?: string;
    markdown?: string;
    svg?: string;
    /** base64 */
    png?: string;
    /** base64 */
    jpeg?: string;
    /** base64 */
    pdf?: string;
    latex?: string;
    /** Any JSON value. (`any`, as the declarations have always had it: user code reads
     * `outputs.json.field` directly; `Result.json` is `unknown`.) */
    json?: any;
    javascript?: string;
}
/** How a run ended: `'ok'`, `'error'`, `'interrupted'`, `'timeout'` or `'kernel_died'`. */
export type ExecutionStatus = WireSchemas['ExecutionStatus'];
/** What {@link Execution.apply} returns for the callbacks. */
export type AppliedEvent = {
    kind: 'stdout' | 'stderr';
    text: string;
} | {
    kind: 'result';
    result: Result;
} | {
    kind: 'error';
    error: ExecutionError;
} | {
    kind: 'end';
};
/** The whole run of one cell. */
export declare class Execution {
    /** Rich results in the order the cell produced them. */
    readonly results: Result[];
    /** The cell's error, if it failed. */
    readonly error?: ExecutionError;
    /** The kernel's counter for this cell (1 for the first cell of a kernel). */
    readonly executionCount: number;
    /** The context the cell ran in. */
    readonly contextId?: string;
    /** How the run ended. */
    readonly status?: ExecutionStatus;
    /** Wall time of the run on the server, in ms. */
    readonly durationMs: number;
    /** CPU time and peak memory of the kernel during the run, when measured. */
    readonly usage?: {
        cpuMs: number;
        peakRssBytes: number;
    };
    /** Output chunks as they arrived (chunks are not lines). */
    readonly logs: {
        stdout: string[];
        stderr: string[];
    };
    private constructor();
    /** Everything the cell wrote to stdout (`print(x * 2)` → `'84\n'`). */
    get stdout(): string;
    /** Everything the cell wrote to stderr. */
    get stderr(): string;
    /** Cloudflare-style: all text output, stdout and stderr interleaved in arrival order. */
    get output(): string;
    /** Cloudflare-style: true when the cell did not fail (`error` is undefined). */
    get success(): boolean;
    /** The main result's `text/plain`, if the last expression had a value. */
    get text(): string | undefined;
    /** Cloudflare-style: the union of the results' formats, e.g. `['text', 'png']`. */
    get formats(): Array<ResultFormat | (string & {})>;
    /** Cloudflare-style: one value per format (see {@link ExecutionOutputs}). */
    get outputs(): ExecutionOutputs;
    /** A plain object with every field, getters included. */
    toJSON(): Record<string, unknown>;
}
export {};
