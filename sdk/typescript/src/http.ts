// The HTTP layer of the SDK: configuration (options or LIZARD_API_URL / LIZARD_API_KEY), JSON
// requests with typed errors, and reading an NDJSON execution stream frame by frame. Requests go
// through one of three transports, chosen per client: in Node, the SDK's own HTTP/1.1 over
// `node:net` (src/http1.ts; a warm round trip ≈ 0.15 ms shorter than through `node:http`), which
// hands `https:` and streamed uploads to `node:http` / `node:https` with a keep-alive agent
// (LIZARD_SDK_TRANSPORT=node:http for every request); the runtime's `fetch` elsewhere (browsers,
// Deno, Bun, edge), when LIZARD_SDK_TRANSPORT=fetch, or when the caller passes a `fetch` of their
// own. All give the same `Reply`, errors and abort semantics. Only the runtime's built-ins are
// used. It knows nothing about sandboxes, contexts or results.

import type * as NodeHttp from 'node:http';
import type * as NodeHttps from 'node:https';
import type * as NodeNet from 'node:net';
import type * as NodeStream from 'node:stream';
import type * as NodeUrl from 'node:url';
import { netTransport } from './http1.js';
import { perUrl, prematureClose, readerReply } from './transport.js';
import type { BodyReader, Chunk, Reply, RequestBody, Transport } from './transport.js';
import {
  AuthenticationError,
  ConnectionError,
  LizardError,
  SandboxError,
  TimeoutError,
  errorFromResponse,
} from './errors.js';

/** Where `lizard serve` listens by default: `'http://127.0.0.1:8787'`. */
export const DEFAULT_API_URL: string = 'http://127.0.0.1:8787';
/** Deadline of control requests (create, info, contexts, …) unless `requestTimeoutMs` says otherwise. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
/** Media type of a streamed execution: one JSON event frame per line. */
export const NDJSON = 'application/x-ndjson';

/** Where and how to reach the Lizard server. */
export interface ConnectionOptions {
  /** Base URL of `lizard serve`, e.g. `http://127.0.0.1:8787`. Default: `LIZARD_API_URL`, else `http://127.0.0.1:8787`. */
  apiUrl?: string;
  /** API key (`lz_…`). Default: `LIZARD_API_KEY`. */
  apiKey?: string;
  /** Client-side deadline of each control request (not of `runCode`), in ms. Default 60000. */
  requestTimeoutMs?: number;
  /**
   * A `fetch` of your own for every request (a proxy's, a test double). Without it the SDK uses
   * `node:http` in Node (unless LIZARD_SDK_TRANSPORT=fetch) and the global `fetch` elsewhere.
   */
  fetch?: typeof globalThis.fetch;
}

/** Connection settings resolved from options and the environment. */
export interface ResolvedConfig {
  apiUrl: string;
  apiKey: string;
  requestTimeoutMs: number;
  fetch?: typeof globalThis.fetch | undefined;
}

/** A parsed NDJSON frame (an event of a stream): its fields as the server sent them. */
export type Frame = Record<string, unknown> & { type?: unknown };

export function resolveConfig(opts: ConnectionOptions = {}): ResolvedConfig {
  const env: Record<string, string | undefined> = globalThis.process?.env ?? {};
  const apiUrl = String(opts.apiUrl ?? env.LIZARD_API_URL ?? DEFAULT_API_URL).replace(/\/+$/, '');
  const apiKey = opts.apiKey ?? env.LIZARD_API_KEY;
  if (!apiKey) {
    throw new AuthenticationError(
      'no Lizard API key: pass { apiKey } or set LIZARD_API_KEY (the admin key is in <data-dir>/admin-key)',
    );
  }
  return {
    apiUrl,
    apiKey,
    requestTimeoutMs: opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
  };
}

/**
 * A signal that aborts with a `TimeoutError` after `ms`. Not `AbortSignal.timeout`: Node's timer
 * holds that signal only weakly, and once `fetch` has its response headers nothing else may hold
 * it either, so a garbage collection during a streamed body silently cancels the deadline
 * (nodejs/node#55428). Here the timer's callback holds the controller; the timer is unref'd, so
 * it never keeps a finished program alive.
 */
function deadlineSignal(ms: number): AbortSignal {
  const ctrl = new AbortController();
  const timer: { unref?: () => unknown } = setTimeout(() => {
    ctrl.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError'));
  }, ms);
  timer.unref?.();
  return ctrl.signal;
}

/** Combine an optional caller signal with an optional deadline. */
function requestSignal(signal: AbortSignal | undefined, timeoutMs: number | null | undefined): AbortSignal | undefined {
  const signals: AbortSignal[] = [];
  if (signal) signals.push(signal);
  if (timeoutMs !== undefined && timeoutMs !== null && timeoutMs > 0 && Number.isFinite(timeoutMs)) {
    signals.push(deadlineSignal(timeoutMs));
  }
  if (signals.length === 0) return undefined;
  if (signals.length === 1) return signals[0];
  return AbortSignal.any(signals);
}

/** A query string (`?a=1&b=2`, or `''` when empty) of the `params` that are neither `undefined` nor `null`. */
export function query(params: Record<string, unknown>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** `err.name`, `err.message`, … when `err` is an object with that string property. */
export function prop(err: unknown, key: string): unknown {
  return err !== null && (typeof err === 'object' || typeof err === 'function')
    ? (err as Record<string, unknown>)[key]
    : undefined;
}

/** `err?.message ?? err`, for error messages. */
export function messageOf(err: unknown): unknown {
  return prop(err, 'message') ?? err;
}

/** Translate what a transport throws (as `fetch` does) into SDK errors (a caller's own abort is passed through). */
export function fetchFailure(
  err: unknown,
  method: string,
  url: string,
  signal: AbortSignal | undefined,
  timeoutMs: number | null | undefined,
): unknown {
  if (err instanceof LizardError) return err;
  if (signal?.aborted && err === signal.reason) return err;
  if (prop(err, 'name') === 'TimeoutError') {
    return new TimeoutError(`${method} ${url} took longer than ${timeoutMs} ms`, { cause: err });
  }
  if (prop(err, 'name') === 'AbortError') return err;
  const cause = prop(err, 'cause');
  const detail = prop(cause, 'code') || prop(cause, 'message') || prop(err, 'message') || String(err);
  return new ConnectionError(`cannot reach the Lizard server at ${url}: ${String(detail)}`, { cause: err });
}

async function readError(res: Reply): Promise<LizardError> {
  const text = await res.text().catch(() => '');
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return errorFromResponse(res.status, body, text);
}

// ---- transports -----------------------------------------------------------------------------

export type { BodyReader, Chunk, Reply } from './transport.js';

/** The runtime's `fetch` (looked up at each request), or the caller's. */
function fetchTransport(fetchFn?: typeof globalThis.fetch): Transport {
  return async ({ method, url, headers, body, signal, signalRead }) => {
    const duplex = typeof ReadableStream !== 'undefined' && body instanceof ReadableStream;
    const init: RequestInit & { duplex?: 'half' } = {
      method,
      headers,
      body: body as RequestInit['body'],
      signal,
      ...(duplex ? { duplex: 'half' } : {}),
    };
    let res = await (fetchFn ?? globalThis.fetch)(url, init);
    if (signal && res.body && !signalRead) {
      // The body read answers to the signal through a pipe of our own: undici's link from the
      // signal to a response it already returned does not survive every garbage collection
      // (nodejs/undici#4068), which would leave a streamed execution without its deadline.
      const piped = res.body.pipeThrough(new TransformStream<Uint8Array, Uint8Array>(), { signal });
      res = new Response(piped, { status: res.status, statusText: res.statusText, headers: res.headers });
    }
    const stream = (): ReadableStream<Uint8Array> => res.body ?? new Blob([]).stream();
    return {
      status: res.status,
      header: (name) => res.headers.get(name),
      reader: () => stream().getReader(),
      stream,
      bytes: async () => new Uint8Array(await res.arrayBuffer()),
      text: () => res.text(),
      json: () => res.json(),
    };
  };
}

/** What the `node:http` transport takes from Node. */
interface NodeModules {
  net: typeof NodeNet;
  http: typeof NodeHttp;
  https: typeof NodeHttps;
  stream: Pick<typeof NodeStream, 'pipeline' | 'Readable'>;
  url: Pick<typeof NodeUrl, 'urlToHttpOptions'>;
}

/** Node's own modules, when this runs in Node (not in Bun or Deno, whose `node:http` is theirs). */
function nodeModules(): NodeModules | undefined {
  const proc = globalThis.process;
  const v = proc?.versions;
  // (getBuiltinModule: Node ≥ 20.16; an older Node uses `fetch`)
  if (!v?.node || v.bun || v.deno || 'Bun' in globalThis || 'Deno' in globalThis) return undefined;
  if (typeof proc.getBuiltinModule !== 'function') return undefined;
  return {
    net: proc.getBuiltinModule('node:net'),
    http: proc.getBuiltinModule('node:http'),
    https: proc.getBuiltinModule('node:https'),
    stream: proc.getBuiltinModule('node:stream'),
    url: proc.getBuiltinModule('node:url'),
  };
}

/**
 * Requests over `node:http` / `node:https`, on one keep-alive agent per scheme shared by every
 * client of the process (an agent pools its sockets per host and port). An idle socket is closed
 * after 4 s (as undici does), before the server's 10 s `--header-read-timeout` could close it
 * under a new request; idle sockets never keep the process alive. It fails as `fetch` does: with
 * the signal's reason once that aborted (the request or its body read then ends, and the socket
 * is closed), otherwise with a `TypeError` whose `cause` is Node's error.
 */
function nodeTransport(m: NodeModules): Transport {
  const agents: Record<string, NodeHttp.Agent> = {
    'http:': new m.http.Agent({ keepAlive: true, timeout: 4_000 }),
    'https:': new m.https.Agent({ keepAlive: true, timeout: 4_000 }),
  };
  // Each URL as `http.request` would make it into options, kept for the URLs asked for again and
  // again (a sandbox's `/execute`): parsing one costs microseconds on every request.
  const targetOf = perUrl((url) => m.url.urlToHttpOptions(new URL(url)));
  return ({ method, url, headers, body, signal }) =>
    new Promise<Reply>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const target = targetOf(url);
      const protocol = target.protocol === 'https:' ? 'https:' : 'http:';
      const lib = protocol === 'https:' ? m.https : m.http;
      // (a copy: `request` adds the options to the URL's)
      const req = lib.request({ ...target, method, headers, agent: agents[protocol] });
      let res: NodeHttp.IncomingMessage | undefined;
      const onAbort = (): void => {
        (res ?? req).destroy(signal?.reason);
        reject(signal?.reason);
      };
      // `release` holds the signal from the response until it closes: no garbage collection can
      // cut the link while the body is read (it is what a deadline needs).
      const release = (): void => signal?.removeEventListener('abort', onAbort);
      signal?.addEventListener('abort', onAbort, { once: true });
      req.on('error', (err) => {
        release();
        reject(new TypeError('fetch failed', { cause: err }));
      });
      req.on('response', (r: NodeHttp.IncomingMessage) => {
        res = r;
        r.on('close', release);
        // (a read reports the error; a body nobody reads must not crash the process)
        r.on('error', () => {});
        resolve(nodeReply(r, signal));
      });
      if (body === undefined || typeof body === 'string' || body instanceof Uint8Array || body instanceof ArrayBuffer) {
        const bytes = body instanceof ArrayBuffer ? new Uint8Array(body) : body;
        if (bytes !== undefined) req.setHeader('content-length', typeof bytes === 'string' ? Buffer.byteLength(bytes) : bytes.byteLength);
        req.end(bytes);
      } else {
        // A Blob (its size known) or a stream (chunked), with the socket's backpressure.
        if (body instanceof Blob) req.setHeader('content-length', body.size);
        const web = body instanceof Blob ? body.stream() : body;
        m.stream.pipeline(m.stream.Readable.fromWeb(web as Parameters<typeof m.stream.Readable.fromWeb>[0]), req, (err) => {
          if (err) req.destroy(err);
        });
      }
    });
}

/** A {@link Reply} of `node:http`'s response, its body read chunk by chunk as it arrives. */
function nodeReply(res: NodeHttp.IncomingMessage, signal: AbortSignal | undefined): Reply {
  const failure = (err: unknown): unknown => (signal?.aborted ? signal.reason : new TypeError('terminated', { cause: err }));
  // The body in paused mode, as Node's own async iterator reads it (what is buffered at once, the
  // socket resumed as the buffer empties), without that iterator's generator and end-of-stream
  // machinery on every chunk. The body ends at 'end' (the socket is then back with the agent);
  // an 'error' (a broken connection, an abort's destroy) or a 'close' before the end fails it.
  const reader = (): BodyReader => {
    let wake: (() => void) | undefined;
    let ended = res.readableEnded;
    let failed: { err: unknown } | undefined;
    const poke = (): void => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    res.on('readable', poke);
    res.on('end', () => {
      ended = true;
      poke();
    });
    res.on('error', (err) => {
      failed ??= { err };
      poke();
    });
    res.on('close', () => {
      if (!ended) failed ??= { err: prematureClose() };
      poke();
    });
    const read = async (): Promise<Chunk> => {
      for (;;) {
        if (failed) throw failure(failed.err);
        const chunk = res.destroyed ? null : (res.read() as Uint8Array | null);
        if (chunk !== null) return { done: false, value: chunk };
        if (ended) return { done: true, value: undefined };
        if (res.destroyed) throw failure(res.errored ?? prematureClose());
        await new Promise<void>((resolve) => (wake = resolve));
      }
    };
    return {
      read,
      // (a body read to its end leaves the socket to the agent; an unfinished one closes it)
      cancel: async () => {
        res.destroy();
      },
    };
  };
  return readerReply(
    res.statusCode ?? 0,
    signal,
    (name) => {
      const v = res.headers[name.toLowerCase()];
      return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
    },
    reader,
  );
}

let fetchDefault: Transport | undefined;
let nodeHttp: Transport | undefined;
let http1: Transport | undefined;

/**
 * The transport of clients without a `fetch` of their own, by LIZARD_SDK_TRANSPORT when the
 * client is made: in Node the SDK's own HTTP/1.1 (`node:http` for `https:` and streamed
 * uploads), `node:http` for every request with `node:http`, the runtime's `fetch` with `fetch`
 * or outside Node. Each is made once and shared by the clients that use it.
 */
function defaultTransport(): Transport {
  const want = globalThis.process?.env?.LIZARD_SDK_TRANSPORT;
  const m = want === 'fetch' ? undefined : nodeModules();
  if (!m) return (fetchDefault ??= fetchTransport());
  nodeHttp ??= nodeTransport(m);
  if (want === 'node:http') return nodeHttp;
  return (http1 ??= netTransport(m.net, nodeHttp));
}

/** Options of {@link HttpClient.send}. */
export interface SendOptions {
  body?: unknown;
  /** Raw bytes (file uploads): a string, bytes, a Blob or a ReadableStream, sent as they are. */
  rawBody?: RequestBody;
  accept?: string;
  signal?: AbortSignal;
  /** `null` means no client deadline (streamed executions). */
  timeoutMs?: number | null;
  /**
   * The caller reads the body with {@link ndjsonFrames} given the request's signal, which then
   * ends the read: the fetch transport puts no pipe of its own in between (it costs a fraction
   * of a millisecond on every cell).
   */
  signalRead?: boolean;
}

/** What {@link HttpClient.send} resolves to. */
export interface Sent {
  res: Reply;
  signal: AbortSignal | undefined;
  url: string;
  timeoutMs: number | null | undefined;
}

/** A small client bound to one server and key. */
export class HttpClient {
  readonly config: ResolvedConfig;
  private readonly transport: Transport;

  constructor(config: ResolvedConfig) {
    this.config = config;
    this.transport = config.fetch ? fetchTransport(config.fetch) : defaultTransport();
  }

  /**
   * Send a request; resolve to the reply once its headers arrived with a 2xx status, throw a
   * typed error otherwise.
   */
  async send(method: string, path: string, opts: SendOptions = {}): Promise<Sent> {
    const url = this.config.apiUrl + path;
    const timeoutMs = opts.timeoutMs === undefined ? this.config.requestTimeoutMs : opts.timeoutMs;
    const signal = requestSignal(opts.signal, timeoutMs);
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.config.apiKey}`,
      accept: opts.accept ?? 'application/json',
    };
    let body: RequestBody | undefined;
    if (opts.rawBody !== undefined) {
      // Raw bytes (file uploads): a string, bytes, a Blob or a ReadableStream, sent as they are.
      headers['content-type'] = 'application/octet-stream';
      body = opts.rawBody;
    } else if (opts.body !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(opts.body);
    }
    let res: Reply;
    try {
      res = await this.transport({ method, url, headers, body, signal, signalRead: Boolean(opts.signalRead) });
    } catch (err) {
      throw fetchFailure(err, method, url, opts.signal, timeoutMs);
    }
    if (res.status < 200 || res.status > 299) throw await readError(res);
    return { res, signal, url, timeoutMs };
  }

  /**
   * Send a request for an NDJSON stream (no client deadline unless `timeoutMs`) under an abort
   * controller of our own, joined with the caller's `signal`: the reader aborts `ctrl` when it gives
   * up (a callback that throws), which closes the stream even when the caller gave no signal.
   */
  async sendStream(
    method: string,
    path: string,
    opts: { body?: unknown; signal?: AbortSignal | undefined; timeoutMs: number | null },
  ): Promise<{ res: Reply; ctrl: AbortController; signal: AbortSignal }> {
    const ctrl = new AbortController();
    const joined = opts.signal ? AbortSignal.any([opts.signal, ctrl.signal]) : ctrl.signal;
    const sent = await this.send(method, path, {
      body: opts.body,
      accept: NDJSON,
      signal: joined,
      timeoutMs: opts.timeoutMs,
      signalRead: true,
    });
    // `sent.signal` is `joined`, or `joined` with the deadline: what must end the read.
    return { res: sent.res, ctrl, signal: sent.signal ?? joined };
  }

  /** A JSON request: the parsed body, or `undefined` for an empty (204) response. */
  async json(
    method: string,
    path: string,
    body?: unknown,
    opts: { signal?: AbortSignal; timeoutMs?: number | null } = {},
  ): Promise<unknown> {
    const { res, url, timeoutMs } = await this.send(method, path, { ...opts, body });
    let text: string;
    try {
      text = await res.text();
    } catch (err) {
      throw fetchFailure(err, method, url, opts.signal, timeoutMs);
    }
    if (!text.trim()) return undefined;
    try {
      return JSON.parse(text) as unknown;
    } catch (err) {
      throw new SandboxError(`${method} ${path}: the server sent a body that is not JSON`, { cause: err });
    }
  }
}

/**
 * Read an NDJSON body as parsed frames, one per line, as they arrive. Chunks are decoded as UTF-8
 * incrementally (a character split across network chunks is kept whole). With `signal`, its abort
 * ends the read with its reason (the body is then closed): what {@link HttpClient.sendStream}'s
 * callers rely on. The generator holds the signal for as long as it reads, so no garbage
 * collection can cut the link (undici's own link can be cut: nodejs/undici#4068); a `node:http`
 * reply's reads already end on their request's signal ({@link Reply.signal}), which its response
 * holds. With `last`, the frame for which it is true ends the frames (a stream's final event):
 * the rest of the body (the response's end, which may come in a later TCP segment) is read in
 * the background, so that the connection is kept alive, and nothing of it is waited for.
 */
export async function* ndjsonFrames(
  body: Reply,
  signal?: AbortSignal,
  last?: (frame: Frame) => boolean,
): AsyncGenerator<Frame, void, undefined> {
  signal?.throwIfAborted();
  const reader = body.reader();
  // A decoder of its own only once a chunk ends inside a character (a new `TextDecoder` costs
  // more than decoding a cell's frames): until then each chunk ends with a whole character.
  let decoder: InstanceType<typeof TextDecoder> | undefined;
  let first = true;
  let onAbort = (): void => {};
  const aborted =
    signal && signal !== body.signal
      ? new Promise<never>((_, reject) => {
          onAbort = () => reject(signal.reason);
          signal.addEventListener('abort', onAbort, { once: true });
        })
      : undefined;
  aborted?.catch(() => {});
  let buf = '';
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await (aborted ? Promise.race([reader.read(), aborted]) : reader.read());
      if (done) {
        if (decoder) buf += decoder.decode();
        finished = true;
        break;
      }
      if (!decoder && value.byteLength > 0 && value[value.byteLength - 1]! < 0x80) {
        buf += WHOLE_UTF8.decode(value);
      } else {
        decoder ??= new TextDecoder('utf-8', { ignoreBOM: true });
        buf += decoder.decode(value, { stream: true });
      }
      // (a byte order mark opens a body, not a frame: as `TextDecoder` drops it by default)
      if (first && buf.length > 0) {
        first = false;
        if (buf.charCodeAt(0) === 0xfeff) buf = buf.slice(1);
      }
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.trim()) continue;
        const frame = parseFrame(line);
        if (last?.(frame)) {
          finished = true;
          drain(reader);
          yield frame;
          return;
        }
        yield frame;
      }
    }
    if (buf.trim()) yield parseFrame(buf);
  } finally {
    if (aborted) signal?.removeEventListener('abort', onAbort);
    // A consumer that stops early (a callback threw) closes the response: the server then
    // interrupts the cell, as it does for any client that goes away.
    if (!finished) await reader.cancel().catch(() => {});
  }
}

/** Decodes chunks that end with a whole character; keeps a byte order mark (see `ndjsonFrames`). */
const WHOLE_UTF8 = new TextDecoder('utf-8', { ignoreBOM: true });

/** Read a body to its end in the background, whatever it holds (a failure ends the read). */
function drain(reader: BodyReader): void {
  const next = (): void => {
    reader.read().then((c) => {
      if (!c.done) next();
    }, () => {});
  };
  next();
}

function parseFrame(line: string): Frame {
  try {
    return JSON.parse(line) as Frame;
  } catch (err) {
    throw new SandboxError(`malformed execution event from the server: ${line.slice(0, 200)}`, {
      code: 'stream_malformed',
      cause: err,
    });
  }
}
