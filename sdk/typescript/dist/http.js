// The HTTP layer of the SDK: configuration (options or LIZARD_API_URL / LIZARD_API_KEY), JSON
// requests with typed errors, and reading an NDJSON execution stream frame by frame. It uses only
// Node's own `fetch` and web streams. It knows nothing about sandboxes, contexts or results.
import { AuthenticationError, ConnectionError, LizardError, SandboxError, TimeoutError, errorFromResponse, } from './errors.js';
/** Where `lizard serve` listens by default: `'http://127.0.0.1:8787'`. */
export const DEFAULT_API_URL = 'http://127.0.0.1:8787';
/** Deadline of control requests (create, info, contexts, …) unless `requestTimeoutMs` says otherwise. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
/** Media type of a streamed execution: one JSON event frame per line. */
export const NDJSON = 'application/x-ndjson';
export function resolveConfig(opts = {}) {
    const env = globalThis.process?.env ?? {};
    const apiUrl = String(opts.apiUrl ?? env.LIZARD_API_URL ?? DEFAULT_API_URL).replace(/\/+$/, '');
    const apiKey = opts.apiKey ?? env.LIZARD_API_KEY;
    if (!apiKey) {
        throw new AuthenticationError('no Lizard API key: pass { apiKey } or set LIZARD_API_KEY (the admin key is in <data-dir>/admin-key)');
    }
    return {
        apiUrl,
        apiKey,
        requestTimeoutMs: opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
    };
}
/**
 * A signal that aborts with a `TimeoutError` after `ms`. Not `AbortSignal.timeout`: Node's timer
 * holds that signal only weakly, and once `fetch` has its response headers nothing else may hold
 * it either, so a garbage collection during a streamed body silently cancels the deadline
 * (nodejs/node#55428). Here the timer's callback holds the controller; the timer is unref'd, so
 * it never keeps a finished program alive.
 */
function deadlineSignal(ms) {
    const ctrl = new AbortController();
    const timer = setTimeout(() => {
        ctrl.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError'));
    }, ms);
    timer.unref?.();
    return ctrl.signal;
}
/** Combine an optional caller signal with an optional deadline. */
function requestSignal(signal, timeoutMs) {
    const signals = [];
    if (signal)
        signals.push(signal);
    if (timeoutMs !== undefined && timeoutMs !== null && timeoutMs > 0 && Number.isFinite(timeoutMs)) {
        signals.push(deadlineSignal(timeoutMs));
    }
    if (signals.length === 0)
        return undefined;
    if (signals.length === 1)
        return signals[0];
    return AbortSignal.any(signals);
}
/** A query string (`?a=1&b=2`, or `''` when empty) of the `params` that are neither `undefined` nor `null`. */
export function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params))
        if (v !== undefined && v !== null)
            q.set(k, String(v));
    const s = q.toString();
    return s ? `?${s}` : '';
}
/** `err.name`, `err.message`, … when `err` is an object with that string property. */
export function prop(err, key) {
    return err !== null && (typeof err === 'object' || typeof err === 'function')
        ? err[key]
        : undefined;
}
/** `err?.message ?? err`, for error messages. */
export function messageOf(err) {
    return prop(err, 'message') ?? err;
}
/** Translate what `fetch` throws into SDK errors (a caller's own abort is passed through). */
export function fetchFailure(err, method, url, signal, timeoutMs) {
    if (err instanceof LizardError)
        return err;
    if (signal?.aborted && err === signal.reason)
        return err;
    if (prop(err, 'name') === 'TimeoutError') {
        return new TimeoutError(`${method} ${url} took longer than ${timeoutMs} ms`, { cause: err });
    }
    if (prop(err, 'name') === 'AbortError')
        return err;
    const cause = prop(err, 'cause');
    const detail = prop(cause, 'code') || prop(cause, 'message') || prop(err, 'message') || String(err);
    return new ConnectionError(`cannot reach the Lizard server at ${url}: ${String(detail)}`, { cause: err });
}
async function readError(res) {
    const text = await res.text().catch(() => '');
    let body;
    try {
        body = JSON.parse(text);
    }
    catch {
        body = undefined;
    }
    return errorFromResponse(res.status, body, text);
}
/** A small client bound to one server and key. */
export class HttpClient {
    constructor(config) {
        this.config = config;
    }
    /**
     * Send a request; resolve to the `Response` once its headers arrived with a 2xx status, throw a
     * typed error otherwise.
     */
    async send(method, path, opts = {}) {
        const url = this.config.apiUrl + path;
        const timeoutMs = opts.timeoutMs === undefined ? this.config.requestTimeoutMs : opts.timeoutMs;
        const signal = requestSignal(opts.signal, timeoutMs);
        const headers = {
            authorization: `Bearer ${this.config.apiKey}`,
            accept: opts.accept ?? 'application/json',
        };
        let body;
        let duplex;
        if (opts.rawBody !== undefined) {
            // Raw bytes (file uploads): a string, bytes, a Blob or a ReadableStream, sent as they are.
            headers['content-type'] = 'application/octet-stream';
            body = opts.rawBody;
            if (typeof ReadableStream !== 'undefined' && body instanceof ReadableStream)
                duplex = 'half';
        }
        else if (opts.body !== undefined) {
            headers['content-type'] = 'application/json';
            body = JSON.stringify(opts.body);
        }
        let res;
        try {
            const init = { method, headers, body, signal, ...(duplex ? { duplex } : {}) };
            res = await fetch(url, init);
        }
        catch (err) {
            throw fetchFailure(err, method, url, opts.signal, timeoutMs);
        }
        if (!res.ok)
            throw await readError(res);
        if (signal && res.body && !opts.signalRead) {
            // The body read answers to the signal through a pipe of our own: undici's link from the
            // signal to a response it already returned does not survive every garbage collection
            // (nodejs/undici#4068), which would leave a streamed execution without its deadline.
            const body = res.body.pipeThrough(new TransformStream(), { signal });
            res = new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
        }
        return { res, signal, url, timeoutMs };
    }
    /**
     * Send a request for an NDJSON stream (no client deadline unless `timeoutMs`) under an abort
     * controller of our own, joined with the caller's `signal`: the reader aborts `ctrl` when it gives
     * up (a callback that throws), which closes the stream even when the caller gave no signal.
     */
    async sendStream(method, path, opts) {
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
    async json(method, path, body, opts = {}) {
        const { res, url, timeoutMs } = await this.send(method, path, { ...opts, body });
        let text;
        try {
            text = await res.text();
        }
        catch (err) {
            throw fetchFailure(err, method, url, opts.signal, timeoutMs);
        }
        if (!text.trim())
            return undefined;
        try {
            return JSON.parse(text);
        }
        catch (err) {
            throw new SandboxError(`${method} ${path}: the server sent a body that is not JSON`, { cause: err });
        }
    }
}
/**
 * Read an NDJSON body as parsed frames, one per line, as they arrive. Chunks are decoded as UTF-8
 * incrementally (a character split across network chunks is kept whole). With `signal`, its abort
 * ends the read with its reason (the body is then closed): what {@link HttpClient.sendStream}'s
 * callers rely on. The generator holds the signal for as long as it reads, so no garbage
 * collection can cut the link (undici's own link can be cut: nodejs/undici#4068).
 */
export async function* ndjsonFrames(body, signal) {
    signal?.throwIfAborted();
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let onAbort = () => { };
    const aborted = signal
        ? new Promise((_, reject) => {
            onAbort = () => reject(signal.reason);
            signal.addEventListener('abort', onAbort, { once: true });
        })
        : undefined;
    aborted?.catch(() => { });
    let buf = '';
    let finished = false;
    try {
        for (;;) {
            const { value, done } = await (aborted ? Promise.race([reader.read(), aborted]) : reader.read());
            if (done) {
                buf += decoder.decode();
                finished = true;
                break;
            }
            buf += decoder.decode(value, { stream: true });
            let nl;
            while ((nl = buf.indexOf('\n')) >= 0) {
                const line = buf.slice(0, nl);
                buf = buf.slice(nl + 1);
                if (line.trim())
                    yield parseFrame(line);
            }
        }
        if (buf.trim())
            yield parseFrame(buf);
    }
    finally {
        signal?.removeEventListener('abort', onAbort);
        // A consumer that stops early (a callback threw) closes the response: the server then
        // interrupts the cell, as it does for any client that goes away.
        if (!finished)
            await reader.cancel().catch(() => { });
        else
            reader.releaseLock();
    }
}
function parseFrame(line) {
    try {
        return JSON.parse(line);
    }
    catch (err) {
        throw new SandboxError(`malformed execution event from the server: ${line.slice(0, 200)}`, {
            code: 'stream_malformed',
            cause: err,
        });
    }
}
