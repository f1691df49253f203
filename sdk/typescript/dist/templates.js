// `Templates`: user templates (`/v1/templates`) — build one from a Dockerfile (streamed: each step
// and log chunk reaches `onStep` / `onLog` as it arrives) or from a sandbox, list, get, delete.
// A template is a read-only layer over its base; sandboxes start from it with
// `CodeSandbox.create({ template: name })`. Wire types are the server's (see
// crates/lizard-proto/src/template.rs), converted to camelCase at this boundary (convert.ts). A directory
// context is packed here (tar.ts). Not here: the build itself (the server runs it in a build
// sandbox; the Dockerfile subset is in templates/README.md).
import { readFile, stat } from 'node:fs/promises';
import { HttpClient, ndjsonFrames, prop, query, resolveConfig } from './http.js';
import { Callbacks, streamError } from './commands.js';
import { toTemplateInfo } from './convert.js';
import { InvalidArgumentError, SandboxError, TemplateBuildError } from './errors.js';
import { tarGzDirectory } from './tar.js';
const enc = encodeURIComponent;
/** At most this many bytes of build context (the server's limit, after base64 decoding). */
export const MAX_CONTEXT_BYTES = 64 * 1024 * 1024;
/** `TemplateBuildError.log` keeps the last this many characters of a build's log. */
const MAX_LOG_CHARS = 1024 * 1024;
function isPlainObject(v) {
    return v !== null && typeof v === 'object' && !Array.isArray(v);
}
function key(name) {
    if (typeof name !== 'string' || !name)
        throw new InvalidArgumentError('a template name is required');
    return enc(name);
}
function tooLarge() {
    return new InvalidArgumentError('the build context is larger than 64 MiB (compressed)', { code: 'payload_too_large' });
}
/**
 * The build context as tar bytes: a directory is packed (tar.gz), a file is read as an archive
 * already, bytes are taken as they are.
 */
async function contextBytes(context) {
    let bytes;
    if (typeof context === 'string') {
        const st = await stat(context).catch(() => undefined);
        if (st?.isDirectory()) {
            try {
                bytes = await tarGzDirectory(context, { maxRawBytes: 8 * MAX_CONTEXT_BYTES });
            }
            catch (err) {
                if (err instanceof RangeError)
                    throw new InvalidArgumentError(err.message, { cause: err });
                throw err;
            }
        }
        else if (st?.isFile()) {
            if (st.size > MAX_CONTEXT_BYTES)
                throw tooLarge();
            bytes = await readFile(context);
        }
        else {
            throw new InvalidArgumentError(`context ${JSON.stringify(context)} is neither a directory nor a tar archive`);
        }
    }
    else if (context instanceof Uint8Array) {
        bytes = context;
    }
    else if (context instanceof ArrayBuffer) {
        bytes = new Uint8Array(context);
    }
    else {
        throw new InvalidArgumentError('context must be a directory path, a tar archive path or the bytes of a tar');
    }
    if (bytes.length > MAX_CONTEXT_BYTES)
        throw tooLarge();
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}
function sandboxId(sb) {
    const id = typeof sb === 'string' ? sb : prop(sb, 'sandboxId');
    if (typeof id !== 'string' || !id)
        throw new InvalidArgumentError('fromSandbox must be a CodeSandbox or a sandbox id');
    return id;
}
/** User templates: built from a Dockerfile or a sandbox, then used with
 * `CodeSandbox.create({ template: name })`. */
export class Templates {
    constructor() { }
    /** Build and resolve with the ready template (a cache hit resolves at once); throws
     * {@link TemplateBuildError} when the Dockerfile is invalid or a step fails. */
    static async build(opts) {
        if (!isPlainObject(opts) || typeof opts.name !== 'string' || !opts.name) {
            throw new InvalidArgumentError('Templates.build takes { name, dockerfile, context?, … } or { name, fromSandbox }');
        }
        const hasDockerfile = opts.dockerfile !== undefined && opts.dockerfile !== null;
        const hasSandbox = opts.fromSandbox !== undefined && opts.fromSandbox !== null;
        if (hasDockerfile === hasSandbox) {
            throw new InvalidArgumentError('a template build takes either dockerfile or fromSandbox');
        }
        const body = { name: opts.name };
        if (opts.project !== undefined)
            body.project = opts.project;
        if (opts.public)
            body.public = true;
        if (hasSandbox) {
            if (opts.context !== undefined || opts.buildArgs !== undefined) {
                throw new InvalidArgumentError('fromSandbox takes no context or buildArgs');
            }
            body.from_sandbox = sandboxId(opts.fromSandbox);
            const http = new HttpClient(resolveConfig(opts));
            return toTemplateInfo((await http.json('POST', '/v1/templates', body)));
        }
        if (typeof opts.dockerfile !== 'string')
            throw new InvalidArgumentError("dockerfile must be the Dockerfile's text");
        body.dockerfile = opts.dockerfile;
        if (opts.buildArgs !== undefined && opts.buildArgs !== null) {
            if (!isPlainObject(opts.buildArgs))
                throw new InvalidArgumentError('buildArgs must be an object of strings');
            const args = {};
            for (const [k, v] of Object.entries(opts.buildArgs))
                if (v !== undefined)
                    args[k] = String(v);
            if (Object.keys(args).length)
                body.build_args = args;
        }
        if (opts.cancelOnDisconnect)
            body.cancel_on_disconnect = true;
        const timeoutMs = opts.timeoutMs;
        if (timeoutMs !== undefined && !(typeof timeoutMs === 'number' && Number.isFinite(timeoutMs) && timeoutMs > 0)) {
            throw new InvalidArgumentError('timeoutMs must be a positive number of milliseconds');
        }
        const http = new HttpClient(resolveConfig(opts));
        if (opts.context !== undefined && opts.context !== null)
            body.context = await contextBytes(opts.context);
        // `ctrl` is our own: a callback that throws closes the stream even without a caller signal.
        const { res, ctrl } = await http.sendStream('POST', '/v1/templates', {
            body,
            signal: opts.signal,
            timeoutMs: timeoutMs ?? null,
        });
        let log = '';
        const callbacks = new Callbacks();
        try {
            for await (const raw of ndjsonFrames(res)) {
                // Fields as the server sends them (W['TemplateBuildEvent']); unknown types are skipped.
                const frame = raw;
                switch (frame.type) {
                    case 'step':
                        await callbacks.call(opts.onStep, { index: frame.index, total: frame.total, name: frame.name });
                        break;
                    case 'log':
                        log += frame.text ?? '';
                        if (log.length > 2 * MAX_LOG_CHARS)
                            log = log.slice(-MAX_LOG_CHARS);
                        await callbacks.call(opts.onLog, { stream: frame.stream, text: frame.text ?? '' });
                        break;
                    case 'done':
                        return toTemplateInfo(frame.template ?? {});
                    case 'error':
                        throw new TemplateBuildError(frame.error?.message ?? 'the template build failed', {
                            code: frame.error?.code ?? 'build_failed',
                            log: log.slice(-MAX_LOG_CHARS),
                        });
                    default:
                        break; // event types this SDK does not know
                }
            }
        }
        catch (err) {
            ctrl.abort(err);
            const timedOut = `the template build took longer than timeoutMs (${timeoutMs} ms); it goes on on the server unless cancelOnDisconnect`;
            throw streamError(err, callbacks, opts.signal, 'during the template build', timedOut);
        }
        throw new SandboxError('the template build stream ended before its `done` or `error` event (the server went away; the build may go on: see Templates.get)', { code: 'stream_ended' });
    }
    /**
     * A template of a running or paused sandbox's files (of the same project): its writable layer,
     * copied with its processes frozen (nothing of its memory), becomes a layer over its template.
     */
    static async fromSandbox(opts) {
        if (!isPlainObject(opts))
            throw new InvalidArgumentError('Templates.fromSandbox takes { name, sandbox }');
        const { sandbox, ...rest } = opts;
        // (`null` when absent: `build` then says that a build takes dockerfile or fromSandbox)
        return Templates.build({ ...rest, fromSandbox: (sandbox ?? null) });
    }
    /** The key's project's templates, the public ones and the built-ins. */
    static async list(opts = {}) {
        const http = new HttpClient(resolveConfig(opts));
        const list = (await http.json('GET', `/v1/templates${query({ project: opts.project })}`));
        return (list?.templates ?? []).map(toTemplateInfo);
    }
    /** {@link NotFoundError} if the key cannot see it. */
    static async get(name, opts = {}) {
        const http = new HttpClient(resolveConfig(opts));
        return toTemplateInfo((await http.json('GET', `/v1/templates/${key(name)}${query({ project: opts.project })}`)));
    }
    /** {@link NotFoundError} if there is none; {@link TemplateInUseError} while another template is built on it. */
    static async delete(name, opts = {}) {
        const http = new HttpClient(resolveConfig(opts));
        await http.json('DELETE', `/v1/templates/${key(name)}${query({ project: opts.project })}`);
    }
}
