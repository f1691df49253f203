// The console's only way to the server: the public HTTP API (`/v1/...`) on the origin that served
// the page, with the signed-in key as a bearer token. Wire types are the ones generated from the
// server's OpenAPI document for the TypeScript SDK (type-only imports: nothing of the SDK is bundled).

import type { components } from '../../sdk/typescript/src/wire';

type Schemas = components['schemas'];
export type SandboxInfo = Schemas['SandboxInfo'];
export type Context = Schemas['Context'];
export type Language = Schemas['Language'];
export type ExecutionResult = Schemas['ExecutionResult'];
export type TemplateInfo = Schemas['TemplateInfo'];
export type CreateSandboxRequest = Schemas['CreateSandboxRequest'];
export type EntryInfo = Schemas['EntryInfo'];
export type ProjectUsage = Schemas['ProjectUsage'];
export type AuditEvent = Schemas['AuditEvent'];
export type MetricSample = Schemas['MetricSample'];

export const LANGUAGES: Language[] = ['python', 'javascript', 'bash'];

/** A failed call: the API's typed `{code, message}` (or what stood in for it). */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** The message of anything thrown, for the person reading it. */
export function messageOf(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

async function failure(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => '');
  try {
    const body = JSON.parse(text) as { code?: unknown; message?: unknown };
    if (typeof body.message === 'string') {
      return new ApiError(res.status, typeof body.code === 'string' ? body.code : String(res.status), body.message);
    }
  } catch {
    // not JSON: the text (or the status) is the message
  }
  return new ApiError(res.status, String(res.status), text.trim() || `${res.status} ${res.statusText}`);
}

/** A query string (`?a=1&b=2`, or `''`) of the params that are set and not empty. */
export function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** The API with one key. */
export class Api {
  readonly key: string;
  constructor(key: string) {
    this.key = key;
  }

  /** Send a request; the `Response` when it is 2xx, an `ApiError` otherwise. */
  async send(
    method: string,
    path: string,
    opts: { json?: unknown; raw?: Blob | string; accept?: string; signal?: AbortSignal } = {},
  ): Promise<Response> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.key}`, accept: opts.accept ?? 'application/json' };
    let body: BodyInit | undefined;
    if (opts.raw !== undefined) {
      headers['content-type'] = 'application/octet-stream';
      body = opts.raw;
    } else if (opts.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(opts.json);
    }
    let res: Response;
    try {
      res = await fetch(path, { method, headers, body, signal: opts.signal ?? null });
    } catch (err) {
      if (err instanceof DOMException && err.name === 'AbortError') throw err;
      throw new ApiError(0, 'unreachable', `cannot reach the server: ${messageOf(err)}`);
    }
    if (!res.ok) throw await failure(res);
    return res;
  }

  /** A JSON request: the parsed answer (`undefined` for an empty one). */
  async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.send(method, path, { json: body });
    const text = await res.text();
    return (text.trim() ? JSON.parse(text) : undefined) as T;
  }

  get<T>(path: string): Promise<T> {
    return this.json<T>('GET', path);
  }

  /**
   * `POST path` with `Accept: application/x-ndjson`: `onFrame` gets each frame (one JSON object
   * a line) as soon as its line has arrived. Resolves when the stream ends.
   */
  async stream(path: string, body: unknown, onFrame: (frame: Record<string, unknown>) => void, signal?: AbortSignal): Promise<void> {
    const res = await this.send('POST', path, { json: body, accept: 'application/x-ndjson', ...(signal ? { signal } : {}) });
    if (!res.body) return;
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (value) buf += value;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) onFrame(JSON.parse(line) as Record<string, unknown>);
      }
      if (done) break;
    }
    if (buf.trim()) onFrame(JSON.parse(buf) as Record<string, unknown>);
  }
}

/** `'k=v,k2=v2'` → `{k: 'v', k2: 'v2'}`; an `ApiError`-like message for a pair without `=`. */
export function parseMetadata(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of text.split(',').map((p) => p.trim()).filter(Boolean)) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`metadata is key=value pairs separated by commas: ${JSON.stringify(pair)} has no key=`);
    out[pair.slice(0, eq).trim()] = pair.slice(eq + 1).trim();
  }
  return out;
}
