// What every transport of the SDK (src/http.ts: `fetch`, `node:http`; src/http1.ts: its own
// HTTP/1.1) takes and gives: a request, and a response whose status and headers arrived and whose
// body is read chunk by chunk, with the whole-body reads (`bytes`, `text`, `json`, `stream`) made
// from that one reader.
/** A {@link Reply} whose body is read through `reader` (called once, by whichever read comes first). */
export function readerReply(status, signal, header, reader) {
    const bytes = async () => {
        const r = reader();
        const parts = [];
        let size = 0;
        for (let c = await r.read(); !c.done; c = await r.read()) {
            parts.push(c.value);
            size += c.value.byteLength;
        }
        const out = new Uint8Array(size);
        let at = 0;
        for (const p of parts) {
            out.set(p, at);
            at += p.byteLength;
        }
        return out;
    };
    const text = async () => new TextDecoder().decode(await bytes());
    return {
        status,
        signal,
        header,
        reader,
        stream: () => {
            const r = reader();
            return new ReadableStream({
                async pull(ctrl) {
                    const c = await r.read();
                    if (c.done)
                        ctrl.close();
                    else
                        ctrl.enqueue(c.value);
                },
                cancel: () => r.cancel(),
            });
        },
        bytes,
        text,
        json: async () => JSON.parse(await text()),
    };
}
/** What Node's stream utilities report when a stream closed before its end. */
export function prematureClose() {
    return Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' });
}
/**
 * `make(url)`, kept for the URLs asked for again and again (a sandbox's `/execute`): parsing one
 * costs microseconds on every request. At most 256 are kept (then forgotten all at once).
 */
export function perUrl(make) {
    const kept = new Map();
    return (url) => {
        let t = kept.get(url);
        if (t === undefined) {
            if (kept.size >= 256)
                kept.clear();
            t = make(url);
            kept.set(url, t);
        }
        return t;
    };
}
