import type { Reply, RequestBody } from './transport.js';
/** Where `lizard serve` listens by default: `'http://127.0.0.1:8787'`. */
export declare const DEFAULT_API_URL: string;
/** Deadline of control requests (create, info, contexts, …) unless `requestTimeoutMs` says otherwise. */
export declare const DEFAULT_REQUEST_TIMEOUT_MS = 60000;
/** Media type of a streamed execution: one JSON event frame per line. */
export declare const NDJSON = "application/x-ndjson";
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
export type Frame = Record<string, unknown> & {
    type?: unknown;
};
export declare function resolveConfig(opts?: ConnectionOptions): ResolvedConfig;
/** A query string (`?a=1&b=2`, or `''` when empty) of the `params` that are neither `undefined` nor `null`. */
export declare function query(params: Record<string, unknown>): string;
/** `err.name`, `err.message`, … when `err` is an object with that string property. */
export declare function prop(err: unknown, key: string): unknown;
/** `err?.message ?? err`, for error messages. */
export declare function messageOf(err: unknown): unknown;
/** Translate what a transport throws (as `fetch` does) into SDK errors (a caller's own abort is passed through). */
export declare function fetchFailure(err: unknown, method: string, url: string, signal: AbortSignal | undefined, timeoutMs: number | null | undefined): unknown;
export type { BodyReader, Chunk, Reply } from './transport.js';
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
export declare class HttpClient {
    readonly config: ResolvedConfig;
    private readonly transport;
    constructor(config: ResolvedConfig);
    /**
     * Send a request; resolve to the reply once its headers arrived with a 2xx status, throw a
     * typed error otherwise.
     */
    send(method: string, path: string, opts?: SendOptions): Promise<Sent>;
    /**
     * Send a request for an NDJSON stream (no client deadline unless `timeoutMs`) under an abort
     * controller of our own, joined with the caller's `signal`: the reader aborts `ctrl` when it gives
     * up (a callback that throws), which closes the stream even when the caller gave no signal.
     */
    sendStream(method: string, path: string, opts: {
        body?: unknown;
        signal?: AbortSignal | undefined;
        timeoutMs: number | null;
    }): Promise<{
        res: Reply;
        ctrl: AbortController;
        signal: AbortSignal;
    }>;
    /** A JSON request: the parsed body, or `undefined` for an empty (204) response. */
    json(method: string, path: string, body?: unknown, opts?: {
        signal?: AbortSignal;
        timeoutMs?: number | null;
    }): Promise<unknown>;
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
export declare function ndjsonFrames(body: Reply, signal?: AbortSignal, last?: (frame: Frame) => boolean): AsyncGenerator<Frame, void, undefined>;
