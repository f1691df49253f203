// `sandbox.files`: the sandbox's filesystem over the server's `/v1/sandboxes/{id}/files` routes
// (read, write, list, stat, mkdir, rename, remove, watch). Relative paths resolve against
// `/home/user` on the server. Wire types are the server's (crates/lizard-proto/src/files.rs),
// converted to camelCase by convert.ts.

import { ndjsonFrames } from './http.js';
import { SandboxNamespace } from './commands.js';
import { toEntry, toFsEvent } from './convert.js';
import { ConflictError, InvalidArgumentError, NotFoundError } from './errors.js';
import type { components } from './wire.js';

type W = components['schemas'];

const OCTETS = 'application/octet-stream';

// ---- files ---------------------------------------------------------------------------------------

/** A filesystem entry (symlinks are not followed). */
export interface EntryInfo {
  /** The last path component. */
  name: string;
  /** The normalised absolute path. */
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  /** Bytes (of the link itself for a symlink). */
  size: number;
  /** Permission bits, e.g. 420 (= 0o644). */
  mode: number;
  /** `ls -l` style, e.g. `-rw-r--r--`. */
  permissions: string;
  owner: string;
  group: string;
  /** Last modification, milliseconds since the Unix epoch. */
  modifiedMs: number;
  /** Where a symlink points. */
  symlinkTarget?: string;
}

/** A change seen by {@link Files.watchDir}. */
export interface FilesystemEvent {
  type: 'create' | 'write' | 'remove' | 'rename' | 'chmod';
  /** Absolute path of the affected entry. */
  path: string;
  /** `path` relative to the watched directory. */
  name: string;
  isDir: boolean;
}

/** What {@link Files.watchDir} resolves to. */
export interface WatchHandle {
  /** Stop watching. */
  stop(): Promise<void>;
}

/** What a file can be written from. */
export type FileData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

/** Options of file transfers. */
export interface FileRequestOptions {
  signal?: AbortSignal;
  /** Client deadline in ms (not applied to streams). */
  requestTimeoutMs?: number;
}

function checkPath(path: unknown, what = 'path'): string {
  if (typeof path !== 'string' || !path) throw new InvalidArgumentError(`${what} must be a non-empty string`);
  return path;
}

/** What `fetch` can send as a file's content. */
function uploadBody(data: unknown): FileData {
  if (typeof data === 'string' || data instanceof Uint8Array || data instanceof ArrayBuffer) return data;
  if (typeof Blob !== 'undefined' && data instanceof Blob) return data;
  if (typeof ReadableStream !== 'undefined' && data instanceof ReadableStream) return data as ReadableStream<Uint8Array>;
  throw new InvalidArgumentError('file data must be a string, Uint8Array, ArrayBuffer, Blob or ReadableStream');
}

/** `sandbox.files`: the sandbox's filesystem. Relative paths start at `/home/user`. */
export class Files extends SandboxNamespace {
  /** @internal */
  private _url(route: string, params: Record<string, unknown>): string {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, String(v));
    return `${this._sandbox._base}/files${route}?${q}`;
  }

  read(path: string, opts?: FileRequestOptions & { format?: 'text' }): Promise<string>;
  read(path: string, opts: FileRequestOptions & { format: 'bytes' }): Promise<Uint8Array>;
  read(path: string, opts: FileRequestOptions & { format: 'stream' }): Promise<ReadableStream<Uint8Array>>;
  /**
   * Read a file: `text` (default, UTF-8), `bytes` (a `Uint8Array`) or `stream` (a
   * `ReadableStream<Uint8Array>`, for files too large to hold in memory).
   */
  async read(
    path: string,
    opts: FileRequestOptions & { format?: 'text' | 'bytes' | 'stream' } = {},
  ): Promise<string | Uint8Array | ReadableStream<Uint8Array>> {
    const format: unknown = opts.format ?? 'text';
    if (format !== 'text' && format !== 'bytes' && format !== 'stream') {
      throw new InvalidArgumentError(`format must be 'text', 'bytes' or 'stream', got ${JSON.stringify(format)}`);
    }
    const { res } = await this._http.send('GET', this._url('', { path: checkPath(path) }), {
      accept: OCTETS,
      signal: opts.signal,
      timeoutMs: format === 'stream' ? null : opts.requestTimeoutMs,
    });
    if (format === 'stream') return res.stream();
    if (format === 'bytes') return res.bytes();
    return res.text();
  }

  /** Write a file (parents are created, an existing file is replaced). */
  write(path: string, data: FileData, opts?: FileRequestOptions): Promise<EntryInfo>;
  /** Write several files, one after the other. */
  write(files: { path: string; data: FileData }[], opts?: FileRequestOptions): Promise<EntryInfo[]>;
  async write(
    pathOrFiles: string | { path: string; data: FileData }[],
    data?: FileData | FileRequestOptions,
    opts: FileRequestOptions = {},
  ): Promise<EntryInfo | EntryInfo[]> {
    if (Array.isArray(pathOrFiles)) {
      const out: EntryInfo[] = [];
      for (const f of pathOrFiles as unknown[]) {
        if (!f || typeof f !== 'object') throw new InvalidArgumentError('write([...]) takes { path, data } objects');
        const { path, data: content } = f as { path: string; data: FileData };
        out.push(await this.write(path, content, typeof data === 'object' && data ? (data as FileRequestOptions) : opts));
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
    return toEntry((await res.json()) as W['EntryInfo']);
  }

  /** Entries below a directory, `depth` levels deep (default 1), sorted by path. */
  async list(path: string, opts: { depth?: number } = {}): Promise<EntryInfo[]> {
    const list = (await this._http.json('GET', this._url('/list', { path: checkPath(path), depth: opts.depth }))) as W['EntryInfo'][];
    return list.map(toEntry);
  }

  async exists(path: string): Promise<boolean> {
    try {
      await this.getInfo(path);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  async getInfo(path: string): Promise<EntryInfo> {
    return toEntry((await this._http.json('GET', this._url('/stat', { path: checkPath(path) }))) as W['EntryInfo']);
  }

  /** Create a directory and its parents: `false` if it already existed. */
  async makeDir(path: string): Promise<boolean> {
    try {
      await this._http.json('POST', `${this._sandbox._base}/files/mkdir`, { path: checkPath(path) });
      return true;
    } catch (err) {
      if (err instanceof ConflictError) return false;
      throw err;
    }
  }

  /** Remove a file, symlink, or directory with its contents. */
  async remove(path: string): Promise<void> {
    await this._http.json('DELETE', this._url('', { path: checkPath(path) }));
  }

  /** Move `from` to `to`; resolves to the moved entry. */
  async rename(from: string, to: string): Promise<EntryInfo> {
    const body = { from: checkPath(from, 'from'), to: checkPath(to, 'to') };
    return toEntry((await this._http.json('POST', `${this._sandbox._base}/files/rename`, body)) as W['EntryInfo']);
  }

  /** Watch a directory; resolves once the watch is in place. */
  async watchDir(
    path: string,
    onEvent: (event: FilesystemEvent) => unknown,
    opts: { recursive?: boolean; signal?: AbortSignal; onExit?: (err?: unknown) => unknown } = {},
  ): Promise<WatchHandle> {
    if (typeof onEvent !== 'function') throw new InvalidArgumentError('watchDir takes an onEvent callback');
    const url = this._url('/watch', { path: checkPath(path), recursive: opts.recursive ? 'true' : undefined });
    const { res, ctrl, signal } = await this._http.sendStream('GET', url, { signal: opts.signal, timeoutMs: null });
    const frames = ndjsonFrames(res, signal);
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
          const r: unknown = onEvent(toFsEvent(frame as Parameters<typeof toFsEvent>[0]));
          if (r && typeof (r as { then?: unknown }).then === 'function') await r;
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
