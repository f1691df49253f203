// `sandbox.files`: the sandbox's filesystem over the server's `/v1/sandboxes/{id}/files` routes
// (read, write, list, stat, mkdir, rename, remove, watch). Relative paths resolve against
// `/home/user` on the server. Wire types are the server's (crates/lizard-proto/src/files.rs),
// converted to camelCase by convert.js.

import { ndjsonFrames } from './http.js';
import { toEntry, toFsEvent } from './convert.js';
import { ConflictError, InvalidArgumentError, NotFoundError } from './errors.js';

const OCTETS = 'application/octet-stream';

function checkPath(path, what = 'path') {
  if (typeof path !== 'string' || !path) throw new InvalidArgumentError(`${what} must be a non-empty string`);
  return path;
}

/** What `fetch` can send as a file's content. */
function uploadBody(data) {
  if (typeof data === 'string' || data instanceof Uint8Array || data instanceof ArrayBuffer) return data;
  if (typeof Blob !== 'undefined' && data instanceof Blob) return data;
  if (typeof ReadableStream !== 'undefined' && data instanceof ReadableStream) return data;
  throw new InvalidArgumentError('file data must be a string, Uint8Array, ArrayBuffer, Blob or ReadableStream');
}

/** `sandbox.files`. */
export class Files {
  /** @param {import('./sandbox.js').CodeSandbox} sandbox */
  constructor(sandbox) {
    Object.defineProperty(this, '_sandbox', { value: sandbox });
  }

  get _http() {
    return this._sandbox._http;
  }

  _url(route, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, String(v));
    return `${this._sandbox._base}/files${route}?${q}`;
  }

  /**
   * Read a file: `text` (default, UTF-8), `bytes` (a `Uint8Array`) or `stream` (a
   * `ReadableStream<Uint8Array>`, for files too large to hold in memory).
   */
  async read(path, opts = {}) {
    const format = opts.format ?? 'text';
    if (!['text', 'bytes', 'stream'].includes(format)) {
      throw new InvalidArgumentError(`format must be 'text', 'bytes' or 'stream', got ${JSON.stringify(format)}`);
    }
    const { res } = await this._http.send('GET', this._url('', { path: checkPath(path) }), {
      accept: OCTETS,
      signal: opts.signal,
      timeoutMs: format === 'stream' ? null : opts.requestTimeoutMs,
    });
    if (format === 'stream') return res.body;
    if (format === 'bytes') return new Uint8Array(await res.arrayBuffer());
    return res.text();
  }

  /**
   * Write a file (parents are created; an existing file is replaced), or several:
   * `write([{ path, data }, …])`. Resolves to the written entry (entries, for a list).
   */
  async write(pathOrFiles, data, opts = {}) {
    if (Array.isArray(pathOrFiles)) {
      const out = [];
      for (const f of pathOrFiles) {
        if (!f || typeof f !== 'object') throw new InvalidArgumentError('write([...]) takes { path, data } objects');
        out.push(await this.write(f.path, f.data, typeof data === 'object' && data ? data : opts));
      }
      return out;
    }
    const body = uploadBody(data);
    const isStream = typeof ReadableStream !== 'undefined' && body instanceof ReadableStream;
    const { res } = await this._http.send('PUT', this._url('', { path: checkPath(pathOrFiles) }), {
      rawBody: body,
      signal: opts.signal,
      timeoutMs: isStream ? null : opts.requestTimeoutMs,
    });
    return toEntry(await res.json());
  }

  /** The entries below a directory, `depth` levels deep (default 1), sorted by path. */
  async list(path, opts = {}) {
    const list = await this._http.json('GET', this._url('/list', { path: checkPath(path), depth: opts.depth }));
    return list.map(toEntry);
  }

  /** Whether something exists at `path`. */
  async exists(path) {
    try {
      await this.getInfo(path);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /** One entry: type, size, mode, owner, modification time… (symlinks are not followed). */
  async getInfo(path) {
    return toEntry(await this._http.json('GET', this._url('/stat', { path: checkPath(path) })));
  }

  /** Create a directory and its missing parents: `true`, or `false` if `path` already existed. */
  async makeDir(path) {
    try {
      await this._http.json('POST', `${this._sandbox._base}/files/mkdir`, { path: checkPath(path) });
      return true;
    } catch (err) {
      if (err instanceof ConflictError) return false;
      throw err;
    }
  }

  /** Remove a file, a symlink, or a directory with everything in it. */
  async remove(path) {
    await this._http.json('DELETE', this._url('', { path: checkPath(path) }));
  }

  /** Move `from` to `to` (parents created; an existing file at `to` is replaced). Resolves to the moved entry. */
  async rename(from, to) {
    const body = { from: checkPath(from, 'from'), to: checkPath(to, 'to') };
    return toEntry(await this._http.json('POST', `${this._sandbox._base}/files/rename`, body));
  }

  /**
   * Watch a directory: `onEvent({ type, path, name, isDir })` for each `create`, `write`, `remove`,
   * `rename`, `chmod`. Resolves once the watch is in place, to a handle whose `stop()` ends it.
   */
  async watchDir(path, onEvent, opts = {}) {
    if (typeof onEvent !== 'function') throw new InvalidArgumentError('watchDir takes an onEvent callback');
    const ctrl = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, ctrl.signal]) : ctrl.signal;
    const url = this._url('/watch', { path: checkPath(path), recursive: opts.recursive ? 'true' : undefined });
    const { res } = await this._http.send('GET', url, { accept: 'application/x-ndjson', signal, timeoutMs: null });
    const frames = ndjsonFrames(res.body);
    // The first frame (`start`) says the watch is in place.
    const first = await frames.next();
    if (first.done || first.value?.type !== 'start') {
      ctrl.abort();
      throw new InvalidArgumentError('the watch stream did not start');
    }
    let stopped = false;
    const done = (async () => {
      try {
        for await (const frame of frames) {
          if (stopped) break;
          if (frame.type === 'start') continue;
          const r = onEvent(toFsEvent(frame));
          if (r && typeof r.then === 'function') await r;
        }
      } catch (err) {
        if (!stopped) await Promise.resolve(opts.onExit?.(err)).catch(() => {});
        return;
      }
      if (!stopped) await Promise.resolve(opts.onExit?.()).catch(() => {});
    })();
    return {
      /** Stop watching (closes the stream). */
      async stop() {
        if (stopped) return;
        stopped = true;
        ctrl.abort();
        await done;
      },
    };
  }
}
