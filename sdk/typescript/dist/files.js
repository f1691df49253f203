// `sandbox.files`: the sandbox's filesystem over the server's `/v1/sandboxes/{id}/files` routes
// (read, write, list, stat, mkdir, rename, remove, watch). Relative paths resolve against
// `/home/user` on the server. Wire types are the server's (crates/lizard-proto/src/files.rs),
// converted to camelCase by convert.ts.
import { ndjsonFrames } from './http.js';
import { SandboxNamespace } from './commands.js';
import { toEntry, toFsEvent } from './convert.js';
import { ConflictError, InvalidArgumentError, NotFoundError } from './errors.js';
const OCTETS = 'application/octet-stream';
function checkPath(path, what = 'path') {
    if (typeof path !== 'string' || !path)
        throw new InvalidArgumentError(`${what} must be a non-empty string`);
    return path;
}
/** What `fetch` can send as a file's content. */
function uploadBody(data) {
    if (typeof data === 'string' || data instanceof Uint8Array || data instanceof ArrayBuffer)
        return data;
    if (typeof Blob !== 'undefined' && data instanceof Blob)
        return data;
    if (typeof ReadableStream !== 'undefined' && data instanceof ReadableStream)
        return data;
    throw new InvalidArgumentError('file data must be a string, Uint8Array, ArrayBuffer, Blob or ReadableStream');
}
/** `sandbox.files`: the sandbox's filesystem. Relative paths start at `/home/user`. */
export class Files extends SandboxNamespace {
    /** @internal */
    _url(route, params) {
        const q = new URLSearchParams();
        for (const [k, v] of Object.entries(params))
            if (v !== undefined)
                q.set(k, String(v));
        return `${this._sandbox._base}/files${route}?${q}`;
    }
    /**
     * Read a file: `text` (default, UTF-8), `bytes` (a `Uint8Array`) or `stream` (a
     * `ReadableStream<Uint8Array>`, for files too large to hold in memory).
     */
    async read(path, opts = {}) {
        const format = opts.format ?? 'text';
        if (format !== 'text' && format !== 'bytes' && format !== 'stream') {
            throw new InvalidArgumentError(`format must be 'text', 'bytes' or 'stream', got ${JSON.stringify(format)}`);
        }
        const { res } = await this._http.send('GET', this._url('', { path: checkPath(path) }), {
            accept: OCTETS,
            signal: opts.signal,
            timeoutMs: format === 'stream' ? null : opts.requestTimeoutMs,
        });
        if (format === 'stream')
            return res.stream();
        if (format === 'bytes')
            return res.bytes();
        return res.text();
    }
    async write(pathOrFiles, data, opts = {}) {
        if (Array.isArray(pathOrFiles)) {
            const out = [];
            for (const f of pathOrFiles) {
                if (!f || typeof f !== 'object')
                    throw new InvalidArgumentError('write([...]) takes { path, data } objects');
                const { path, data: content } = f;
                out.push(await this.write(path, content, typeof data === 'object' && data ? data : opts));
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
        return toEntry((await res.json()));
    }
    /** Entries below a directory, `depth` levels deep (default 1), sorted by path. */
    async list(path, opts = {}) {
        const list = (await this._http.json('GET', this._url('/list', { path: checkPath(path), depth: opts.depth })));
        return list.map(toEntry);
    }
    async exists(path) {
        try {
            await this.getInfo(path);
            return true;
        }
        catch (err) {
            if (err instanceof NotFoundError)
                return false;
            throw err;
        }
    }
    async getInfo(path) {
        return toEntry((await this._http.json('GET', this._url('/stat', { path: checkPath(path) }))));
    }
    /** Create a directory and its parents: `false` if it already existed. */
    async makeDir(path) {
        try {
            await this._http.json('POST', `${this._sandbox._base}/files/mkdir`, { path: checkPath(path) });
            return true;
        }
        catch (err) {
            if (err instanceof ConflictError)
                return false;
            throw err;
        }
    }
    /** Remove a file, symlink, or directory with its contents. */
    async remove(path) {
        await this._http.json('DELETE', this._url('', { path: checkPath(path) }));
    }
    /** Move `from` to `to`; resolves to the moved entry. */
    async rename(from, to) {
        const body = { from: checkPath(from, 'from'), to: checkPath(to, 'to') };
        return toEntry((await this._http.json('POST', `${this._sandbox._base}/files/rename`, body)));
    }
    /** Watch a directory; resolves once the watch is in place. */
    async watchDir(path, onEvent, opts = {}) {
        if (typeof onEvent !== 'function')
            throw new InvalidArgumentError('watchDir takes an onEvent callback');
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
                    if (stopped)
                        break;
                    if (frame.type === 'start')
                        continue;
                    const r = onEvent(toFsEvent(frame));
                    if (r && typeof r.then === 'function')
                        await r;
                }
            }
            catch (err) {
                if (!stopped)
                    await Promise.resolve(opts.onExit?.(err)).catch(() => { });
                return;
            }
            if (!stopped)
                await Promise.resolve(opts.onExit?.()).catch(() => { });
        })();
        return {
            /** Stop watching (closes the stream). */
            async stop() {
                if (stopped)
                    return;
                stopped = true;
                ctrl.abort();
                await done;
            },
        };
    }
}
