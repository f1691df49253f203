// What a run of code produces, client side: `Result` (one rich value as a MIME bundle with named
// accessors), `ExecutionError` (a failed cell) and `Execution` (the whole run, folded from the
// server's NDJSON event frames, with both the Lizard/E2B shape and the Cloudflare shape). It does
// no I/O: sandbox.ts feeds it frames.

import type { InspectOptions } from 'node:util';
import type { components } from './wire.js';

type WireSchemas = components['schemas'];

const INSPECT: unique symbol = Symbol.for('nodejs.util.inspect.custom');

type Inspect = (value: unknown, options: InspectOptions) => string;

/** Named formats a result can have. */
export type ResultFormat =
  | 'text'
  | 'html'
  | 'markdown'
  | 'svg'
  | 'png'
  | 'jpeg'
  | 'pdf'
  | 'latex'
  | 'json'
  | 'javascript';

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
] as const satisfies readonly (readonly [ResultFormat, string])[];
/**
 * The data behind a result, next to its display formats (not listed in `formats`): a pandas
 * DataFrame's columns (`table`) and a matplotlib figure's chart (`chart`: type, title, axes,
 * elements).
 */
export const DATA_MIME = [
  ['table', 'application/vnd.lizard.table+json'],
  ['chart', 'application/vnd.lizard.chart+json'],
] as const;
const KNOWN_MIME = new Set<string>([...FORMAT_MIME, ...DATA_MIME].map(([, mime]) => mime));
const FORMAT_ORDER: ResultFormat[] = FORMAT_MIME.map(([name]) => name);

/** Formats whose value can stand for the result as text when there is no `text/plain`, best first. */
const TEXTUAL_FALLBACK = ['markdown', 'html', 'latex', 'svg', 'javascript'] as const;

/** Shorten long strings (base64 images, HTML) for console output only. */
function preview(value: unknown): unknown {
  if (typeof value === 'string' && value.length > 200) {
    return `${value.slice(0, 80)}… (${value.length} chars)`;
  }
  return value;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object';
}

/** A `result` event (or an aggregated result) as the server sends it. */
type WireResult = { is_main_result?: unknown; data?: unknown; metadata?: unknown };

/**
 * One rich value produced by a cell: the value of its last expression (`isMainResult`) or a
 * `display()` output (a matplotlib figure, an HTML table, …).
 */
export class Result {
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

  private constructor(wire: WireResult | undefined) {
    const bundle: Record<string, unknown> = wire?.data && typeof wire.data === 'object' ? (wire.data as Record<string, unknown>) : {};
    this.isMainResult = Boolean(wire?.is_main_result);
    // The named accessors hold the bundle's values as they are (the server's types).
    const named: Record<string, unknown> = {};
    for (const [name, mime] of [...FORMAT_MIME, ...DATA_MIME]) {
      if (mime in bundle) named[name] = bundle[mime];
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
  static fromWire(wire: WireResult | undefined): Result {
    return new Result(wire);
  }

  /** @internal */
  [INSPECT](_depth: number, options: InspectOptions, inspect: Inspect): string {
    const shown: Record<string, unknown> = {
      isMainResult: this.isMainResult,
      formats: this.formats,
      data: preview(this.data),
    };
    for (const name of FORMAT_ORDER) if (this[name] !== undefined) shown[name] = preview(this[name]);
    if (Object.keys(this.extra).length) shown.extra = Object.keys(this.extra);
    if (this.metadata !== undefined) shown.metadata = this.metadata;
    return `Result ${inspect(shown, { ...options, depth: 2 })}`;
  }
}

function primaryText(r: Result): string | undefined {
  if (typeof r.text === 'string') return r.text;
  for (const name of TEXTUAL_FALLBACK) {
    const v: unknown = r[name];
    if (typeof v === 'string') return v;
  }
  if (r.json !== undefined) return JSON.stringify(r.json);
  return undefined;
}

/**
 * A failed cell (data, not a thrown exception): a Python exception, a JavaScript throw, a Bash
 * cell that exited non-zero (`name === 'ExitCode'`, `value` is the status), `KeyboardInterrupt`,
 * `Timeout` (the run's `timeoutMs` passed) or `KernelDied` (the context got a fresh kernel).
 */
export class ExecutionError {
  /** Exception class name, e.g. `NameError`, `ReferenceError`, `ExitCode`, `KernelDied`. */
  readonly name: string;
  /** The exception's message. */
  readonly value: string;
  /** Same as `value`. */
  readonly message: string;
  /** The traceback as plain text (no colour codes); may be empty. */
  readonly traceback: string;

  private constructor(wire: { name?: unknown; value?: unknown; traceback?: unknown } | undefined) {
    this.name = String(wire?.name ?? 'Error');
    this.value = String(wire?.value ?? '');
    this.message = this.value;
    this.traceback = String(wire?.traceback ?? '');
  }

  /** @internal An error of an `error` frame (or an aggregated error). */
  static fromWire(wire: { name?: unknown; value?: unknown; traceback?: unknown } | undefined): ExecutionError {
    return new ExecutionError(wire);
  }

  toString(): string {
    return this.value ? `${this.name}: ${this.value}` : this.name;
  }
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
export type AppliedEvent =
  | { kind: 'stdout' | 'stderr'; text: string }
  | { kind: 'result'; result: Result }
  | { kind: 'error'; error: ExecutionError }
  | { kind: 'end' };

/** The whole run of one cell. */
export class Execution {
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
  readonly usage?: { cpuMs: number; peakRssBytes: number };
  /** Output chunks as they arrived (chunks are not lines). */
  readonly logs: { stdout: string[]; stderr: string[] };
  /** @internal */
  declare private readonly _output: string[];

  private constructor() {
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
  static empty(): Execution {
    return new Execution();
  }

  /** Everything the cell wrote to stdout (`print(x * 2)` → `'84\n'`). */
  get stdout(): string {
    return this.logs.stdout.join('');
  }

  /** Everything the cell wrote to stderr. */
  get stderr(): string {
    return this.logs.stderr.join('');
  }

  /** Cloudflare-style: all text output, stdout and stderr interleaved in arrival order. */
  get output(): string {
    return this._output.join('');
  }

  /** Cloudflare-style: true when the cell did not fail (`error` is undefined). */
  get success(): boolean {
    return this.error === undefined;
  }

  /** The main result's `text/plain`, if the last expression had a value. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }

  /** Cloudflare-style: the union of the results' formats, e.g. `['text', 'png']`. */
  get formats(): Array<ResultFormat | (string & {})> {
    const seen = new Set<string>(this.results.flatMap((r) => r.formats));
    const named: string[] = FORMAT_ORDER;
    return [...FORMAT_ORDER.filter((f) => seen.has(f)), ...[...seen].filter((f) => !named.includes(f))];
  }

  /** Cloudflare-style: one value per format (see {@link ExecutionOutputs}). */
  get outputs(): ExecutionOutputs {
    const main = this.results.find((r) => r.isMainResult);
    const out: Record<string, unknown> = {};
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
    return out as ExecutionOutputs;
  }

  /**
   * @internal
   * Fold one event frame into the run. Returns what the frame carried for the callbacks, or
   * `undefined` for frames without a payload (and for types this SDK does not know, which the
   * protocol says to ignore).
   */
  apply(frame: unknown): AppliedEvent | undefined {
    if (!isObject(frame)) return undefined;
    // The fold writes the fields the public type shows read-only.
    const self = this as { -readonly [K in keyof Execution]: Execution[K] };
    switch (frame.type) {
      case 'start':
        self.executionCount = Number(frame.execution_count ?? 0);
        self.contextId = frame.context_id as string | undefined;
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
        self.status = frame.status as ExecutionStatus | undefined;
        self.durationMs = Number(frame.duration_ms ?? 0);
        const usage = frame.usage;
        if (usage) {
          const u = usage as { cpu_ms?: unknown; peak_rss_bytes?: unknown };
          self.usage = { cpuMs: u.cpu_ms as number, peakRssBytes: u.peak_rss_bytes as number };
        }
        return { kind: 'end' };
      }
      default:
        return undefined;
    }
  }

  /** A plain object with every field, getters included. */
  toJSON(): Record<string, unknown> {
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
  [INSPECT](_depth: number, options: InspectOptions, inspect: Inspect): string {
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
