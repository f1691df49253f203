// What a run of code produces, client side: `Result` (one rich value as a MIME bundle with named
// accessors), `ExecutionError` (a failed cell) and `Execution` (the whole run, folded from the
// server's NDJSON event frames, with both the Lizard/E2B shape and the Cloudflare shape). It does
// no I/O: sandbox.ts feeds it frames.
const INSPECT = Symbol.for('nodejs.util.inspect.custom');
/**
 * Named formats and their MIME types, in the order `formats` lists them (so a matplotlib figure is
 * `['text', 'png']` and a DataFrame `['text', 'html']`).
 */
export const FORMAT_MIME = [
    ['text', 'text/plain'],
    ['html', 'text/html'],
    ['markdown', 'text/markdown'],
    ['svg', 'image/svg+xml'],
    ['png', 'image/png'],
    ['jpeg', 'image/jpeg'],
    ['pdf', 'application/pdf'],
    ['latex', 'text/latex'],
    ['json', 'application/json'],
    ['javascript', 'application/javascript'],
];
/**
 * The data behind a result, next to its display formats (not listed in `formats`): a pandas
 * DataFrame's columns (`table`) and a matplotlib figure's chart (`chart`: type, title, axes,
 * elements).
 */
export const DATA_MIME = [
    ['table', 'application/vnd.lizard.table+json'],
    ['chart', 'application/vnd.lizard.chart+json'],
];
const KNOWN_MIME = new Set([...FORMAT_MIME, ...DATA_MIME].map(([, mime]) => mime));
const FORMAT_ORDER = FORMAT_MIME.map(([name]) => name);
/** Formats whose value can stand for the result as text when there is no `text/plain`, best first. */
const TEXTUAL_FALLBACK = ['markdown', 'html', 'latex', 'svg', 'javascript'];
/** Shorten long strings (base64 images, HTML) for console output only. */
function preview(value) {
    if (typeof value === 'string' && value.length > 200) {
        return `${value.slice(0, 80)}… (${value.length} chars)`;
    }
    return value;
}
function isObject(v) {
    return v !== null && typeof v === 'object';
}
/**
 * One rich value produced by a cell: the value of its last expression (`isMainResult`) or a
 * `display()` output (a matplotlib figure, an HTML table, …).
 */
export class Result {
    constructor(wire) {
        const bundle = wire?.data && typeof wire.data === 'object' ? wire.data : {};
        this.isMainResult = Boolean(wire?.is_main_result);
        // The named accessors hold the bundle's values as they are (the server's types).
        const named = {};
        for (const [name, mime] of [...FORMAT_MIME, ...DATA_MIME]) {
            if (mime in bundle)
                named[name] = bundle[mime];
        }
        Object.assign(this, named);
        this.formats = [
            ...FORMAT_MIME.filter(([, mime]) => mime in bundle).map(([name]) => name),
            ...Object.keys(bundle).filter((mime) => !KNOWN_MIME.has(mime)),
        ];
        this.data = primaryText(this);
        this.extra = Object.fromEntries(Object.entries(bundle).filter(([mime]) => !KNOWN_MIME.has(mime)));
        this.raw = bundle;
        this.metadata = wire?.metadata ?? undefined;
    }
    /** @internal A result of a `result` frame (or an aggregated result). */
    static fromWire(wire) {
        return new Result(wire);
    }
    /** @internal */
    [INSPECT](_depth, options, inspect) {
        const shown = {
            isMainResult: this.isMainResult,
            formats: this.formats,
            data: preview(this.data),
        };
        for (const name of FORMAT_ORDER)
            if (this[name] !== undefined)
                shown[name] = preview(this[name]);
        if (Object.keys(this.extra).length)
            shown.extra = Object.keys(this.extra);
        if (this.metadata !== undefined)
            shown.metadata = this.metadata;
        return `Result ${inspect(shown, { ...options, depth: 2 })}`;
    }
}
function primaryText(r) {
    if (typeof r.text === 'string')
        return r.text;
    for (const name of TEXTUAL_FALLBACK) {
        const v = r[name];
        if (typeof v === 'string')
            return v;
    }
    if (r.json !== undefined)
        return JSON.stringify(r.json);
    return undefined;
}
/**
 * A failed cell (data, not a thrown exception): a Python exception, a JavaScript throw, a Bash
 * cell that exited non-zero (`name === 'ExitCode'`, `value` is the status), `KeyboardInterrupt`,
 * `Timeout` (the run's `timeoutMs` passed) or `KernelDied` (the context got a fresh kernel).
 */
export class ExecutionError {
    constructor(wire) {
        this.name = String(wire?.name ?? 'Error');
        this.value = String(wire?.value ?? '');
        this.message = this.value;
        this.traceback = String(wire?.traceback ?? '');
    }
    /** @internal An error of an `error` frame (or an aggregated error). */
    static fromWire(wire) {
        return new ExecutionError(wire);
    }
    toString() {
        return this.value ? `${this.name}: ${this.value}` : this.name;
    }
}
/** The whole run of one cell. */
export class Execution {
    constructor() {
        this.results = [];
        this.error = undefined;
        this.executionCount = 0;
        this.contextId = undefined;
        this.status = undefined;
        this.durationMs = 0;
        this.usage = undefined;
        this.logs = { stdout: [], stderr: [] };
        Object.defineProperty(this, '_output', { value: [], enumerable: false });
    }
    /** @internal An empty run, to fold frames into. */
    static empty() {
        return new Execution();
    }
    /** Everything the cell wrote to stdout (`print(x * 2)` → `'84\n'`). */
    get stdout() {
        return this.logs.stdout.join('');
    }
    /** Everything the cell wrote to stderr. */
    get stderr() {
        return this.logs.stderr.join('');
    }
    /** Cloudflare-style: all text output, stdout and stderr interleaved in arrival order. */
    get output() {
        return this._output.join('');
    }
    /** Cloudflare-style: true when the cell did not fail (`error` is undefined). */
    get success() {
        return this.error === undefined;
    }
    /** The main result's `text/plain`, if the last expression had a value. */
    get text() {
        return this.results.find((r) => r.isMainResult)?.text;
    }
    /** Cloudflare-style: the union of the results' formats, e.g. `['text', 'png']`. */
    get formats() {
        const seen = new Set(this.results.flatMap((r) => r.formats));
        const named = FORMAT_ORDER;
        return [...FORMAT_ORDER.filter((f) => seen.has(f)), ...[...seen].filter((f) => !named.includes(f))];
    }
    /** Cloudflare-style: one value per format (see {@link ExecutionOutputs}). */
    get outputs() {
        const main = this.results.find((r) => r.isMainResult);
        const out = {};
        for (const name of FORMAT_ORDER) {
            if (main && main[name] !== undefined) {
                out[name] = main[name];
                continue;
            }
            for (let i = this.results.length - 1; i >= 0; i--) {
                const r = this.results[i];
                if (r !== undefined && r[name] !== undefined) {
                    out[name] = r[name];
                    break;
                }
            }
        }
        return out;
    }
    /**
     * @internal
     * Fold one event frame into the run. Returns what the frame carried for the callbacks, or
     * `undefined` for frames without a payload (and for types this SDK does not know, which the
     * protocol says to ignore).
     */
    apply(frame) {
        if (!isObject(frame))
            return undefined;
        // The fold writes the fields the public type shows read-only.
        const self = this;
        switch (frame.type) {
            case 'start':
                self.executionCount = Number(frame.execution_count ?? 0);
                self.contextId = frame.context_id;
                return undefined;
            case 'stdout':
            case 'stderr': {
                const text = String(frame.text ?? '');
                this.logs[frame.type].push(text);
                this._output.push(text);
                return { kind: frame.type, text };
            }
            case 'result': {
                const result = Result.fromWire(frame);
                this.results.push(result);
                return { kind: 'result', result };
            }
            case 'error': {
                const error = ExecutionError.fromWire(frame);
                self.error = error;
                return { kind: 'error', error };
            }
            case 'end': {
                self.status = frame.status;
                self.durationMs = Number(frame.duration_ms ?? 0);
                const usage = frame.usage;
                if (usage) {
                    const u = usage;
                    self.usage = { cpuMs: u.cpu_ms, peakRssBytes: u.peak_rss_bytes };
                }
                return { kind: 'end' };
            }
            default:
                return undefined;
        }
    }
    /** A plain object with every field, getters included. */
    toJSON() {
        return {
            stdout: this.stdout,
            stderr: this.stderr,
            output: this.output,
            success: this.success,
            results: this.results,
            error: this.error,
            executionCount: this.executionCount,
            contextId: this.contextId,
            status: this.status,
            durationMs: this.durationMs,
            usage: this.usage,
            logs: this.logs,
            formats: this.formats,
            outputs: this.outputs,
        };
    }
    /** @internal */
    [INSPECT](_depth, options, inspect) {
        const shown = {
            stdout: this.stdout,
            stderr: this.stderr,
            results: this.results,
            error: this.error,
            executionCount: this.executionCount,
            success: this.success,
            status: this.status,
        };
        return `Execution ${inspect(shown, { ...options, depth: 3 })}`;
    }
}
