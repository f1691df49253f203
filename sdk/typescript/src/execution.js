// What a run of code produces, client side: `Result` (one rich value as a MIME bundle with named
// accessors), `ExecutionError` (a failed cell) and `Execution` (the whole run, folded from the
// server's NDJSON event frames, with both the Lizard/E2B shape and the Cloudflare shape). It does
// no I/O: sandbox.js feeds it frames.

const INSPECT = Symbol.for('nodejs.util.inspect.custom');

/**
 * Named formats and their MIME types, in the order `formats` lists them (so a matplotlib figure is
 * `['text', 'png']` and a DataFrame `['text', 'html']`).
 */
export const FORMAT_MIME = /** @type {const} */ ([
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
]);
/**
 * The data behind a result, next to its display formats (not listed in `formats`): a pandas
 * DataFrame's columns (`table`) and a matplotlib figure's chart (`chart`: type, title, axes,
 * elements).
 */
export const DATA_MIME = /** @type {const} */ ([
  ['table', 'application/vnd.lizard.table+json'],
  ['chart', 'application/vnd.lizard.chart+json'],
]);
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

/**
 * One rich value produced by a cell: the value of its last expression (`isMainResult`) or a
 * `display()` output (a matplotlib figure, an HTML table, …).
 *
 * `data` is the result's primary textual value: its `text/plain` representation when it has one
 * (`runCode('1 + 1')` → `data === '2'`), else the first of Markdown, HTML, LaTeX, SVG or JavaScript
 * that it has, else its JSON serialized, else `undefined` (an image alone has no textual value; read
 * `png`/`jpeg`).
 */
export class Result {
  /**
   * @param {{ is_main_result?: boolean, data?: Record<string, unknown>, metadata?: unknown }} wire
   *   a `result` event (or an aggregated result) as the server sends it
   */
  constructor(wire) {
    const bundle = wire?.data && typeof wire.data === 'object' ? wire.data : {};
    /** True for the value of the cell's last expression, false for `display()` output. */
    this.isMainResult = Boolean(wire?.is_main_result);
    for (const [name, mime] of [...FORMAT_MIME, ...DATA_MIME]) {
      if (mime in bundle) this[name] = bundle[mime];
    }
    /** Named formats present, in a fixed order (`text`, `html`, `markdown`, `svg`, `png`, …), then any other MIME type as is. */
    this.formats = [
      ...FORMAT_MIME.filter(([, mime]) => mime in bundle).map(([name]) => name),
      ...Object.keys(bundle).filter((mime) => !KNOWN_MIME.has(mime)),
    ];
    /** The result's primary textual value (see the class docs). */
    this.data = primaryText(this);
    /** MIME types without a named accessor (e.g. `application/vnd.plotly.v1+json`). */
    this.extra = Object.fromEntries(Object.entries(bundle).filter(([mime]) => !KNOWN_MIME.has(mime)));
    /** The whole MIME bundle as the server sent it. */
    this.raw = bundle;
    /** Kernel-provided metadata (e.g. image size), when any. */
    this.metadata = wire?.metadata ?? undefined;
  }

  [INSPECT](_depth, options, inspect) {
    const shown = { isMainResult: this.isMainResult, formats: this.formats, data: preview(this.data) };
    for (const name of FORMAT_ORDER) if (this[name] !== undefined) shown[name] = preview(this[name]);
    if (Object.keys(this.extra).length) shown.extra = Object.keys(this.extra);
    if (this.metadata !== undefined) shown.metadata = this.metadata;
    return `Result ${inspect(shown, { ...options, depth: 2 })}`;
  }
}

function primaryText(r) {
  if (typeof r.text === 'string') return r.text;
  for (const name of TEXTUAL_FALLBACK) if (typeof r[name] === 'string') return r[name];
  if (r.json !== undefined) return JSON.stringify(r.json);
  return undefined;
}

/**
 * A failed cell: a Python exception, a JavaScript throw, a Bash cell that exited non-zero
 * (`name === 'ExitCode'`, `value` is the status), an interrupt (`KeyboardInterrupt`), `timeoutMs`
 * passing (`Timeout`) or a kernel that died (`KernelDied`; the context got a fresh kernel).
 * It is data, not a thrown exception.
 */
export class ExecutionError {
  /** @param {{ name?: string, value?: string, traceback?: string }} wire */
  constructor(wire) {
    /** Exception class name, e.g. `NameError`, `ReferenceError`, `ExitCode`, `KernelDied`. */
    this.name = String(wire?.name ?? 'Error');
    /** The exception's message (the server's `value`). */
    this.value = String(wire?.value ?? '');
    /** Same as `value`, under the name the Error convention uses. */
    this.message = this.value;
    /** The traceback as plain text (no colour codes); may be empty. */
    this.traceback = String(wire?.traceback ?? '');
  }

  toString() {
    return this.value ? `${this.name}: ${this.value}` : this.name;
  }
}

/**
 * The whole run of one cell. Built incrementally from the event stream; complete when `runCode`
 * resolves.
 */
export class Execution {
  constructor() {
    /** Rich results in the order the cell produced them. */
    this.results = /** @type {Result[]} */ ([]);
    /** The cell's error, if it failed. */
    this.error = /** @type {ExecutionError | undefined} */ (undefined);
    /** The kernel's counter for this cell (1 for the first cell of a kernel). */
    this.executionCount = 0;
    /** The context the cell ran in. */
    this.contextId = /** @type {string | undefined} */ (undefined);
    /** `ok`, `error`, `interrupted`, `timeout` or `kernel_died` once the run ended. */
    this.status = /** @type {string | undefined} */ (undefined);
    /** Wall time of the run on the server. */
    this.durationMs = 0;
    /** CPU time and peak memory of the kernel during the run, when measured. */
    this.usage = /** @type {{ cpuMs: number, peakRssBytes: number } | undefined} */ (undefined);
    /** Output chunks as they arrived (chunks are not lines). */
    this.logs = { stdout: /** @type {string[]} */ ([]), stderr: /** @type {string[]} */ ([]) };
    Object.defineProperty(this, '_output', { value: [], enumerable: false });
  }

  /** Everything the cell wrote to stdout. */
  get stdout() {
    return this.logs.stdout.join('');
  }

  /** Everything the cell wrote to stderr. */
  get stderr() {
    return this.logs.stderr.join('');
  }

  /** All text output, stdout and stderr interleaved in the order the chunks arrived. */
  get output() {
    return this._output.join('');
  }

  /** True when the cell did not fail. */
  get success() {
    return this.error === undefined;
  }

  /** The text of the main result (the last expression's value), if any. */
  get text() {
    return this.results.find((r) => r.isMainResult)?.text;
  }

  /** Union of the formats of all results, in `Result.formats` order. */
  get formats() {
    const seen = new Set(this.results.flatMap((r) => r.formats));
    return [...FORMAT_ORDER.filter((f) => seen.has(f)), ...[...seen].filter((f) => !FORMAT_ORDER.includes(f))];
  }

  /**
   * One value per format: taken from the main result when it has that format, else from the last
   * result that has it. `outputs.png` is base64, `outputs.json` any JSON value, the rest strings.
   */
  get outputs() {
    const main = this.results.find((r) => r.isMainResult);
    const out = {};
    for (const name of FORMAT_ORDER) {
      if (main && main[name] !== undefined) {
        out[name] = main[name];
        continue;
      }
      for (let i = this.results.length - 1; i >= 0; i--) {
        if (this.results[i][name] !== undefined) {
          out[name] = this.results[i][name];
          break;
        }
      }
    }
    return out;
  }

  /**
   * Fold one event frame into the run. Returns what the frame carried for the callbacks, or
   * `undefined` for frames without a payload (and for types this SDK does not know, which the
   * protocol says to ignore).
   * @param {Record<string, any>} frame
   * @returns {{ kind: 'stdout' | 'stderr', text: string } | { kind: 'result', result: Result } |
   *   { kind: 'error', error: ExecutionError } | { kind: 'end' } | undefined}
   */
  apply(frame) {
    switch (frame?.type) {
      case 'start':
        this.executionCount = Number(frame.execution_count ?? 0);
        this.contextId = frame.context_id;
        return undefined;
      case 'stdout':
      case 'stderr': {
        const text = String(frame.text ?? '');
        this.logs[frame.type].push(text);
        this._output.push(text);
        return { kind: frame.type, text };
      }
      case 'result': {
        const result = new Result(frame);
        this.results.push(result);
        return { kind: 'result', result };
      }
      case 'error': {
        const error = new ExecutionError(frame);
        this.error = error;
        return { kind: 'error', error };
      }
      case 'end':
        this.status = frame.status;
        this.durationMs = Number(frame.duration_ms ?? 0);
        if (frame.usage) {
          this.usage = { cpuMs: frame.usage.cpu_ms, peakRssBytes: frame.usage.peak_rss_bytes };
        }
        return { kind: 'end' };
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
