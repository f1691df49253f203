/** A request's body as the transports send it. */
export type RequestBody = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;
/** A request as `HttpClient.send` hands it to a transport. */
export interface TransportRequest {
    method: string;
    url: string;
    headers: Record<string, string>;
    body: RequestBody | undefined;
    signal: AbortSignal | undefined;
    /** The reader ends the body read on `signal` itself (`SendOptions.signalRead`). */
    signalRead: boolean;
}
/** Sends a request: resolves once the response headers arrived, rejects as `fetch` does. */
export type Transport = (req: TransportRequest) => Promise<Reply>;
/** A chunk of a body, or its end, as a web stream's reader reads it. */
export type Chunk = {
    done: false;
    value: Uint8Array;
} | {
    done: true;
    value?: Uint8Array | undefined;
};
/** A body's chunks, read as from a web stream's reader; `cancel` closes the body. */
export interface BodyReader {
    read(): Promise<Chunk>;
    cancel(): Promise<void>;
}
/**
 * A response whose headers arrived, from any transport. Its body is read once, by one of
 * `reader`, `stream`, `bytes`, `text` or `json`; as with `fetch`, a read fails with the request
 * signal's reason once that aborted, and with a `TypeError` when the connection broke.
 */
export interface Reply {
    readonly status: number;
    /**
     * The request's signal when the transport itself ends every read of this body on its abort
     * (`node:http`, the SDK's own HTTP/1.1), so that `ndjsonFrames` need not race each read
     * against it.
     */
    readonly signal?: AbortSignal | undefined;
    /** A header's value (the name in any case), `null` when absent. */
    header(name: string): string | null;
    reader(): BodyReader;
    /** The body as a web stream (file downloads). */
    stream(): ReadableStream<Uint8Array>;
    bytes(): Promise<Uint8Array>;
    /** The body as UTF-8 text (a BOM dropped, invalid bytes replaced, as `Response.text`). */
    text(): Promise<string>;
    json(): Promise<unknown>;
}
/** A {@link Reply} whose body is read through `reader` (called once, by whichever read comes first). */
export declare function readerReply(status: number, signal: AbortSignal | undefined, header: (name: string) => string | null, reader: () => BodyReader): Reply;
/** What Node's stream utilities report when a stream closed before its end. */
export declare function prematureClose(): Error;
/**
 * `make(url)`, kept for the URLs asked for again and again (a sandbox's `/execute`): parsing one
 * costs microseconds on every request. At most 256 are kept (then forgotten all at once).
 */
export declare function perUrl<T>(make: (url: string) => T): (url: string) => T;
