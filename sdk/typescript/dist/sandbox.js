// `CodeSandbox`: one Lizard sandbox and everything a client does with it — lifecycle (create,
// connect, pause, resume, kill, timeout, info), contexts, `runCode` (always streamed, callbacks as
// frames arrive), the Cloudflare-style aliases (`createCodeContext`, …), `exec` for shell
// commands, and the `commands` (commands.ts), `pty` (pty.ts) and `files` (files.ts) namespaces. It does not
// re-implement the wire types: they are the server's (see crates/lizard-proto), converted to
// camelCase at this boundary (convert.ts).
import { Callbacks, Commands, callback, streamError } from './commands.js';
import { Execution } from './execution.js';
import { Files } from './files.js';
import { Pty } from './pty.js';
import { HttpClient, NDJSON, ndjsonFrames, resolveConfig } from './http.js';
import { volumeMountsBody } from './volumes.js';
import { snapshotId } from './snapshots.js';
import { toContext, toForkedContext, toInfo, toNetworkLog, toSnapshotInfo } from './convert.js';
import { InvalidArgumentError, NotFoundError, SandboxError, TimeoutError } from './errors.js';
/** The template `create` uses when none is given: `'code-interpreter-v1'`. */
export const DEFAULT_TEMPLATE = 'code-interpreter-v1';
const enc = encodeURIComponent;
// ---- runCode -------------------------------------------------------------------------------------
/** An execution stream's final frame. */
const isEndFrame = (frame) => frame.type === 'end';
// ---- helpers -------------------------------------------------------------------------------------
function isPlainObject(v) {
    return v !== null && typeof v === 'object' && !Array.isArray(v);
}
function stringMap(value, what) {
    if (value === undefined || value === null)
        return undefined;
    if (!isPlainObject(value))
        throw new InvalidArgumentError(`${what} must be an object of strings`);
    const out = {};
    for (const [k, v] of Object.entries(value)) {
        if (v === undefined)
            continue;
        out[k] = String(v);
    }
    return Object.keys(out).length ? out : undefined;
}
function positiveInt(value, what) {
    if (value === undefined || value === null)
        return undefined;
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
        throw new InvalidArgumentError(`${what} must be a positive number of milliseconds`);
    }
    return Math.ceil(value);
}
/** `onTimeout` as the wire's `on_timeout`. */
function onTimeoutBody(value) {
    if (value === undefined || value === null)
        return undefined;
    if (value !== 'kill' && value !== 'pause')
        throw new InvalidArgumentError("onTimeout must be 'kill' or 'pause'");
    return value;
}
/** `ctx` as an id: a context object (`{ id }`) or its id. */
function contextId(ctx, what = 'context') {
    if (typeof ctx === 'string' && ctx)
        return ctx;
    if (isPlainObject(ctx) && typeof ctx.id === 'string' && ctx.id)
        return ctx.id;
    throw new InvalidArgumentError(`${what} must be a context object or a context id`);
}
/** Drop the keys whose value is `undefined` (the server's defaults apply to them). */
function dropUndefined(body) {
    for (const k of Object.keys(body))
        if (body[k] === undefined)
            delete body[k];
}
function limitsBody(limits) {
    if (limits === undefined || limits === null)
        return undefined;
    if (!isPlainObject(limits))
        throw new InvalidArgumentError('limits must be an object');
    const body = {
        memory_mb: limits.memoryMb,
        cpu_millicores: limits.cpuMillicores,
        pids: limits.pids,
        tmp_mb: limits.tmpMb,
        disk_mb: limits.diskMb,
    };
    dropUndefined(body);
    return body;
}
function contextLimitsBody(l) {
    const out = {};
    if (l.memoryMb !== undefined)
        out.memory_mb = l.memoryMb;
    if (l.cpuMillicores !== undefined)
        out.cpu_millicores = l.cpuMillicores;
    return out;
}
function isStrings(v) {
    return Array.isArray(v) && v.every((d) => typeof d === 'string');
}
/**
 * `'none'`, `'all'`, a list of destinations (allowed) or `{ allow?, deny? }` → the wire form of
 * `network.egress`.
 */
function egressBody(egress) {
    if (egress === 'none' || egress === 'all')
        return egress;
    if (isStrings(egress))
        return { allow: [...egress] };
    if (isPlainObject(egress)) {
        const unknown = Object.keys(egress).filter((k) => k !== 'allow' && k !== 'deny' && egress[k] !== undefined);
        const ok = (v) => v === undefined || isStrings(v);
        const { allow, deny } = egress;
        if (!unknown.length && ok(allow) && ok(deny)) {
            const out = {};
            if (isStrings(allow))
                out.allow = [...allow];
            if (isStrings(deny))
                out.deny = [...deny];
            return out;
        }
    }
    throw new InvalidArgumentError("egress must be 'none', 'all', an array of destinations or { allow?: string[], deny?: string[] }");
}
/**
 * `[{ host, headers: { Name: 'template' } }]` → the wire form of `network.inject` (the same
 * shape; header names and `${secret:NAME}` templates are the caller's, sent as they are).
 */
function injectBody(inject) {
    const rule = (r) => isPlainObject(r) &&
        typeof r.host === 'string' &&
        Object.keys(r).every((k) => k === 'host' || k === 'headers') &&
        isPlainObject(r.headers) &&
        Object.values(r.headers).every((v) => typeof v === 'string');
    if (!Array.isArray(inject) || !inject.every(rule)) {
        throw new InvalidArgumentError("inject must be an array of { host: 'api.example.com', headers: { Authorization: 'Bearer ${secret:NAME}' } }");
    }
    return inject.map((r) => ({ host: r.host, headers: { ...r.headers } }));
}
/** `create`'s `egress`, `inject`, `publicPorts` and `autoResume` → the request's `network`
 * (absent when none is given). */
function networkBody(egress, inject, publicPorts, autoResume) {
    const noEgress = egress === undefined || egress === null;
    const noInject = inject === undefined || inject === null;
    const flags = {
        ...(flagBody(publicPorts, 'publicPorts') ? { public_ports: true } : {}),
        ...(flagBody(autoResume, 'autoResume') ? { auto_resume: true } : {}),
    };
    if (noEgress && noInject)
        return Object.keys(flags).length ? flags : undefined;
    if (noEgress) {
        throw new InvalidArgumentError('inject needs egress to its hosts: give egress as well (e.g. egress: [host])');
    }
    return { egress: egressBody(egress), ...(noInject ? {} : { inject: injectBody(inject) }), ...flags };
}
/** A boolean option (`publicPorts`, `autoResume`), or absent. */
function flagBody(v, name) {
    if (v === undefined || v === null)
        return undefined;
    if (typeof v !== 'boolean')
        throw new InvalidArgumentError(`${name} must be true or false`);
    return v;
}
// ---- the sandbox ---------------------------------------------------------------------------------
/**
 * A Lizard sandbox with stateful Python, JavaScript and Bash kernels: variables, imports and
 * functions persist between `runCode` calls, like a Jupyter notebook.
 *
 * ```ts
 * const sandbox = await CodeSandbox.create({ project: 'my-project' });
 * await sandbox.runCode('x = 42');
 * console.log((await sandbox.runCode('print(x * 2)')).stdout); // "84\n"
 * await sandbox.kill();
 * ```
 */
export class CodeSandbox {
    /** Use {@link CodeSandbox.create} or {@link CodeSandbox.connect} instead. */
    constructor(sandboxId, http, info) {
        if (!(http instanceof HttpClient)) {
            throw new InvalidArgumentError('use CodeSandbox.create(...) or CodeSandbox.connect(id) to get a sandbox');
        }
        this.sandboxId = sandboxId;
        Object.defineProperty(this, '_http', { value: http });
        Object.defineProperty(this, '_info', { value: info ? toInfo(info) : undefined, writable: true });
        Object.defineProperty(this, 'commands', { value: new Commands(this), enumerable: true });
        Object.defineProperty(this, 'pty', { value: new Pty(this), enumerable: true });
        Object.defineProperty(this, 'files', { value: new Files(this), enumerable: true });
    }
    /** Create a sandbox from a template (`code-interpreter-v1` by default). */
    static async create(opts = {}) {
        if (!isPlainObject(opts))
            throw new InvalidArgumentError('CodeSandbox.create takes an options object');
        if (opts.snapshot !== undefined && opts.snapshot !== null)
            return CodeSandbox._fromSnapshot(opts);
        const body = {
            project: opts.project,
            template: opts.template ?? DEFAULT_TEMPLATE,
            timeout_ms: positiveInt(opts.timeoutMs, 'timeoutMs'),
            on_timeout: onTimeoutBody(opts.onTimeout),
            metadata: stringMap(opts.metadata, 'metadata'),
            env: stringMap(opts.envs, 'envs'),
            limits: limitsBody(opts.limits),
            volumes: volumeMountsBody(opts.volumes),
            network: networkBody(opts.egress, opts.inject, opts.publicPorts, opts.autoResume),
        };
        dropUndefined(body);
        const http = new HttpClient(resolveConfig(opts));
        const info = (await http.json('POST', '/v1/sandboxes', body));
        return new CodeSandbox(info.sandbox_id, http, info);
    }
    /** @internal `create({ snapshot })`: a clone; only its own lifetime and labels may be given. */
    static async _fromSnapshot(opts) {
        const id = snapshotId(opts.snapshot);
        for (const k of ['template', 'envs', 'limits', 'volumes', 'egress', 'inject', 'publicPorts', 'autoResume']) {
            if (opts[k] !== undefined) {
                throw new InvalidArgumentError(`a sandbox from a snapshot has the snapshot's template, envs, limits, volumes and network: ${k} cannot be given with snapshot`);
            }
        }
        const body = {
            // An admin key clones into the snapshot's project (a clone stays in its snapshot's project).
            project: opts.project ?? (isPlainObject(opts.snapshot) ? opts.snapshot.project : undefined),
            snapshot_id: id,
            timeout_ms: positiveInt(opts.timeoutMs, 'timeoutMs'),
            on_timeout: onTimeoutBody(opts.onTimeout),
            metadata: stringMap(opts.metadata, 'metadata'),
        };
        dropUndefined(body);
        const http = new HttpClient(resolveConfig(opts));
        const info = (await http.json('POST', '/v1/sandboxes', body));
        return new CodeSandbox(info.sandbox_id, http, info);
    }
    /**
     * Connect to an existing sandbox by id; a paused sandbox is resumed with its kernels' state intact,
     * a hibernated one relaunched with its contexts restored (see {@link CodeSandbox.restoreReport}).
     */
    static async connect(sandboxId, opts = {}) {
        if (typeof sandboxId !== 'string' || !sandboxId) {
            throw new InvalidArgumentError('CodeSandbox.connect takes a sandbox id');
        }
        const http = new HttpClient(resolveConfig(opts));
        let info = (await http.json('GET', `/v1/sandboxes/${enc(sandboxId)}`));
        if (info.state === 'killed') {
            throw new NotFoundError(`sandbox ${sandboxId} was killed`, { code: 'not_found', status: 404 });
        }
        if (info.state === 'paused' || info.state === 'hibernated') {
            info = (await http.json('POST', `/v1/sandboxes/${enc(sandboxId)}/resume`));
        }
        return new CodeSandbox(sandboxId, http, info);
    }
    /** The sandboxes this key can see, newest first. */
    static async list(opts = {}) {
        const http = new HttpClient(resolveConfig(opts));
        const q = new URLSearchParams();
        if (opts.project)
            q.set('project', opts.project);
        if (opts.state)
            q.set('state', opts.state);
        const meta = stringMap(opts.metadata, 'metadata');
        if (meta) {
            q.set('metadata', Object.entries(meta)
                .map(([k, v]) => `${k}=${v}`)
                .join(','));
        }
        const qs = q.toString();
        const list = (await http.json('GET', `/v1/sandboxes${qs ? `?${qs}` : ''}`));
        return list.map(toInfo);
    }
    /** Kill a sandbox by id: `true` if it was killed, `false` if it did not exist. */
    static async kill(sandboxId, opts = {}) {
        const http = new HttpClient(resolveConfig(opts));
        try {
            await http.json('DELETE', `/v1/sandboxes/${enc(sandboxId)}`);
            return true;
        }
        catch (err) {
            if (err instanceof NotFoundError)
                return false;
            throw err;
        }
    }
    /** @internal */
    get _base() {
        return `/v1/sandboxes/${enc(this.sandboxId)}`;
    }
    // ---- lifecycle ----------------------------------------------------------------------------
    /**
     * URL of a service listening on `port` inside the sandbox (HTTP and WebSocket), proxied by the
     * server; requests need the API key as a bearer token.
     */
    getHost(port) {
        if (!Number.isInteger(port) || port < 1 || port > 65535) {
            throw new InvalidArgumentError(`port must be an integer in 1..65535, got ${port}`);
        }
        return `${this._http.config.apiUrl}${this._base}/ports/${port}`;
    }
    /** After a resume from hibernation (`resume()` or `connect`), and in a sandbox made from a
     * snapshot or by {@link CodeSandbox.fork}: what each context got back and what was lost. */
    get restoreReport() {
        return this._info?.restore;
    }
    /** @internal The answer of a lifecycle request, remembered as the sandbox's latest info. */
    async _update(method, path, body) {
        this._info = toInfo((await this._http.json(method, path, body)));
        return this._info;
    }
    /** The sandbox's state, template, limits and timeout. */
    async getInfo() {
        return this._update('GET', this._base);
    }
    /** Whether the sandbox is running (false when paused or gone). */
    async isRunning() {
        try {
            return (await this.getInfo()).state === 'running';
        }
        catch (err) {
            if (err instanceof NotFoundError)
                return false;
            throw err;
        }
    }
    /** Kill the sandbox: `true` if it was killed, `false` if it was already gone. */
    async kill() {
        try {
            await this._http.json('DELETE', this._base);
            return true;
        }
        catch (err) {
            if (err instanceof NotFoundError)
                return false;
            throw err;
        }
    }
    /** Freeze the sandbox; kernels keep their state. Resume with `resume()` or `CodeSandbox.connect(id)`. */
    async pause() {
        return this._update('POST', `${this._base}/pause`);
    }
    /**
     * Continue a paused sandbox, or relaunch a hibernated one and restore its contexts (`restore` in
     * the answer lists per context what was restored and what was lost). Idempotent.
     */
    async resume() {
        return this._update('POST', `${this._base}/resume`);
    }
    /**
     * Save every context's state to disk and stop the sandbox's processes: it holds no memory and
     * survives a server restart. `hibernation` in the answer lists what each context saved and what
     * it could not. Idempotent.
     */
    async hibernate() {
        return this._update('POST', `${this._base}/hibernate`);
    }
    /**
     * Save a snapshot (the kernels' state and a copy of the disk) that new sandboxes start from
     * with `CodeSandbox.create({ snapshot })`. The sandbox keeps running; a hibernated one is a
     * {@link ConflictError}. The snapshot lives until {@link Snapshots.delete}.
     */
    async createSnapshot(opts = {}) {
        if (!isPlainObject(opts))
            throw new InvalidArgumentError('createSnapshot takes an options object');
        const body = {};
        const metadata = stringMap(opts.metadata, 'metadata');
        if (metadata)
            body.metadata = metadata;
        return toSnapshotInfo((await this._http.json('POST', `${this._base}/snapshots`, body)));
    }
    /** A new running sandbox with this one's kernels' state and files (this one keeps running). */
    async fork(opts = {}) {
        if (!isPlainObject(opts))
            throw new InvalidArgumentError('fork takes an options object');
        const body = {};
        const timeoutMs = positiveInt(opts.timeoutMs, 'timeoutMs');
        if (timeoutMs !== undefined)
            body.timeout_ms = timeoutMs;
        const metadata = stringMap(opts.metadata, 'metadata');
        if (metadata)
            body.metadata = metadata;
        const info = (await this._http.json('POST', `${this._base}/fork`, body));
        return new CodeSandbox(info.sandbox_id, this._http, info);
    }
    /** Set the sandbox's lifetime to `timeoutMs` from now. */
    async setTimeout(timeoutMs) {
        const ms = positiveInt(timeoutMs, 'timeoutMs');
        if (ms === undefined)
            throw new InvalidArgumentError('setTimeout takes a number of milliseconds');
        return this._update('POST', `${this._base}/timeout`, { timeout_ms: ms });
    }
    /** Replace the sandbox's egress rules and/or header injection rules, live (`PATCH
     * /v1/sandboxes/{id}/network`): its next connection and DNS query follow them, and its next
     * request to an `inject` host gets the secrets' current values. The one of `egress` and
     * `inject` not given is kept; `inject: []` removes every rule. A sandbox created without
     * egress is a {@link ConflictError}; rules that open anything need an admin key or a project
     * with `allow_egress` ({@link AuthenticationError}, code `permission_denied`); a bad entry, an
     * inject host the egress does not allow or an unknown secret is an
     * {@link InvalidArgumentError} naming it. */
    async setNetwork(opts) {
        const given = (v) => v !== undefined && v !== null;
        const o = opts;
        if (!isPlainObject(o) || !['egress', 'inject', 'publicPorts', 'autoResume'].some((k) => given(o[k]))) {
            throw new InvalidArgumentError('setNetwork takes { egress?, inject?, publicPorts?, autoResume? } (at least one)');
        }
        // The server keeps the part not given.
        const body = {};
        if (given(o.egress))
            body.egress = egressBody(o.egress);
        if (given(o.inject))
            body.inject = injectBody(o.inject);
        if (given(o.publicPorts))
            body.public_ports = flagBody(o.publicPorts, 'publicPorts');
        if (given(o.autoResume))
            body.auto_resume = flagBody(o.autoResume, 'autoResume');
        return this._update('PATCH', `${this._base}/network`, body);
    }
    /** What the sandbox did through the package mirror and its egress, and what was refused. */
    async networkLog() {
        return toNetworkLog((await this._http.json('GET', `${this._base}/network/log`)));
    }
    // ---- contexts -------------------------------------------------------------------------------
    /** Create a context: an independent kernel in this sandbox. */
    async createContext(opts = {}) {
        const body = {};
        if (opts.language !== undefined)
            body.language = opts.language;
        if (opts.cwd !== undefined)
            body.cwd = opts.cwd;
        if (opts.limits !== undefined)
            body.limits = contextLimitsBody(opts.limits);
        return toContext((await this._http.json('POST', `${this._base}/contexts`, body)));
    }
    /** Every context of the sandbox, the default ones included. */
    async listContexts() {
        const list = (await this._http.json('GET', `${this._base}/contexts`));
        return list.map(toContext);
    }
    /** One context. */
    async getContext(ctx) {
        return toContext((await this._http.json('GET', `${this._base}/contexts/${enc(contextId(ctx))}`)));
    }
    /** Replace the context's kernel with a fresh one: its variables and state are cleared. */
    async restartContext(ctx) {
        return toContext((await this._http.json('POST', `${this._base}/contexts/${enc(contextId(ctx))}/restart`)));
    }
    /**
     * Fork a context: a new context holding a copy of the live kernel's state (copy-on-write), or,
     * when that would lose threads, child processes or servers, a checkpoint of the kernel's
     * processes (see {@link ForkContextOptions.exact}). A source running a cell → `ConflictError`.
     */
    async forkContext(ctx, opts = {}) {
        const body = {};
        if (opts.limits !== undefined)
            body.limits = contextLimitsBody(opts.limits);
        if (opts.exact !== undefined)
            body.exact = opts.exact;
        const w = (await this._http.json('POST', `${this._base}/contexts/${enc(contextId(ctx))}/fork`, body));
        return toForkedContext(w);
    }
    /** Interrupt the cell running in the context (state kept). */
    async interruptContext(ctx) {
        await this._http.json('POST', `${this._base}/contexts/${enc(contextId(ctx))}/interrupt`);
    }
    /** Delete the context and stop its kernel. */
    async deleteContext(ctx) {
        await this._http.json('DELETE', `${this._base}/contexts/${enc(contextId(ctx))}`);
    }
    /** Cloudflare-style {@link CodeSandbox.createContext}: resolves to `{ id, language, … }`. */
    createCodeContext(opts = {}) {
        return this.createContext(opts);
    }
    /** Cloudflare-style {@link CodeSandbox.listContexts}. */
    listCodeContexts() {
        return this.listContexts();
    }
    /** Cloudflare-style {@link CodeSandbox.deleteContext}. */
    deleteCodeContext(ctx) {
        return this.deleteContext(ctx);
    }
    // ---- running code ---------------------------------------------------------------------------
    /**
     * Run a cell, streaming its output to the callbacks as it is produced; resolves to the whole
     * {@link Execution} when the cell ends. A failing cell resolves too, with `execution.error`.
     * Throws `InvalidArgumentError` (before any request) when both `context` and `language` are given.
     */
    async runCode(code, opts = {}) {
        if (typeof code !== 'string')
            throw new InvalidArgumentError('runCode takes the code as a string');
        if (!isPlainObject(opts))
            throw new InvalidArgumentError('runCode options must be an object');
        const hasContext = opts.context !== undefined && opts.context !== null;
        const hasLanguage = opts.language !== undefined && opts.language !== null;
        if (hasContext && hasLanguage) {
            throw new InvalidArgumentError('pass either `context` or `language` to runCode, not both: a context already has a language');
        }
        const body = { code };
        if (hasContext)
            body.context = contextId(opts.context);
        if (hasLanguage) {
            if (typeof opts.language !== 'string')
                throw new InvalidArgumentError('language must be a string');
            body.language = opts.language;
        }
        const env = stringMap(opts.envs, 'envs');
        if (env)
            body.env = env;
        const timeoutMs = positiveInt(opts.timeoutMs, 'timeoutMs');
        if (timeoutMs !== undefined)
            body.timeout_ms = timeoutMs;
        // With a caller's signal or a deadline, `ctrl` is our own, joined with them. A callback that
        // throws closes the stream either way (the server then interrupts the cell): `ndjsonFrames`
        // cancels an unfinished body when its reader stops. Without either, no signal at all (an
        // abort listener per cell costs more than the rest of the SDK's own work on it).
        const path = `${this._base}/execute`;
        const { res, ctrl, signal } = opts.signal || opts.requestTimeoutMs
            ? await this._http.sendStream('POST', path, {
                body,
                signal: opts.signal,
                timeoutMs: opts.requestTimeoutMs ?? null,
            })
            : {
                res: (await this._http.send('POST', path, { body, accept: NDJSON, timeoutMs: null, signalRead: true })).res,
                ctrl: undefined,
                signal: undefined,
            };
        const execution = Execution.empty();
        const contentType = res.header('content-type') ?? '';
        if (!contentType.includes(NDJSON)) {
            // A server that answered with the aggregated execution instead of a stream.
            await foldAggregate(execution, (await res.json()), opts);
            return execution;
        }
        let ended = false;
        const callbacks = new Callbacks();
        try {
            // (the `end` frame is the last: the response's own end is not waited for)
            for await (const frame of ndjsonFrames(res, signal, isEndFrame)) {
                const ev = execution.apply(frame);
                if (!ev)
                    continue;
                // (a callback not given is not awaited: no turn of the event loop per frame for nothing)
                switch (ev.kind) {
                    case 'stdout':
                        if (opts.onStdout)
                            await callbacks.call(opts.onStdout, ev.text);
                        if (opts.onOutput)
                            await callbacks.call(opts.onOutput, ev.text, 'stdout');
                        break;
                    case 'stderr':
                        if (opts.onStderr)
                            await callbacks.call(opts.onStderr, ev.text);
                        if (opts.onOutput)
                            await callbacks.call(opts.onOutput, ev.text, 'stderr');
                        break;
                    case 'result':
                        if (opts.onResult)
                            await callbacks.call(opts.onResult, ev.result);
                        break;
                    case 'error':
                        if (opts.onError)
                            await callbacks.call(opts.onError, ev.error);
                        break;
                    case 'end':
                        ended = true;
                        break;
                }
            }
        }
        catch (err) {
            ctrl?.abort(err);
            const timedOut = `the execution took longer than requestTimeoutMs (${opts.requestTimeoutMs} ms)`;
            throw streamError(err, callbacks, opts.signal, 'during the execution', timedOut);
        }
        if (!ended) {
            throw new SandboxError('the execution stream ended before its `end` event (the server or sandbox went away)', {
                code: 'stream_ended',
            });
        }
        return execution;
    }
    // ---- shell commands -------------------------------------------------------------------------
    /**
     * Run one shell command (`bash -c`, a new process each time) and wait for it. A non-zero exit is
     * `exitCode` (it does not throw); past `timeout` it throws a `TimeoutError` with `.result`.
     */
    async exec(command, opts = {}) {
        if (typeof command !== 'string')
            throw new InvalidArgumentError('exec takes the command as a string');
        if (!isPlainObject(opts))
            throw new InvalidArgumentError('exec options must be an object');
        const timeoutMs = positiveInt(opts.timeout ?? opts.timeoutMs, 'timeout');
        const started = Date.now();
        const { fold } = await this.commands._start(command, {
            cwd: opts.cwd,
            envs: stringMap(opts.env ?? opts.envs, 'env'),
            timeoutMs,
            signal: opts.signal,
            onStdout: async (t) => {
                await callback(opts.onStdout, t);
                await callback(opts.onOutput, 'stdout', t);
            },
            onStderr: async (t) => {
                await callback(opts.onStderr, t);
                await callback(opts.onOutput, 'stderr', t);
            },
        });
        // (a foreground start: the fold of the whole stream, never a handle)
        const r = fold.result();
        if (r.timedOut) {
            const t = new TimeoutError(`command timed out after ${timeoutMs} ms: ${command}`);
            t.result = execResult(command, r, 124, started);
            throw t;
        }
        return execResult(command, r, r.exitCode, started);
    }
}
function execResult(command, r, exitCode, started) {
    return {
        success: exitCode === 0,
        exitCode,
        stdout: r.stdout,
        stderr: r.stderr,
        command,
        duration: Date.now() - started,
        timestamp: new Date(started).toISOString(),
    };
}
/** Fold an aggregated `Execution` body (non-streaming response), calling the callbacks after the fact. */
async function foldAggregate(execution, agg, opts) {
    execution.apply({ type: 'start', execution_count: agg.execution_count, context_id: agg.context_id });
    for (const text of agg.stdout ?? []) {
        execution.apply({ type: 'stdout', text });
        await callback(opts.onStdout, text);
        await callback(opts.onOutput, text, 'stdout');
    }
    for (const text of agg.stderr ?? []) {
        execution.apply({ type: 'stderr', text });
        await callback(opts.onStderr, text);
        await callback(opts.onOutput, text, 'stderr');
    }
    for (const r of agg.results ?? []) {
        const ev = execution.apply({ type: 'result', ...r });
        await callback(opts.onResult, ev.result);
    }
    if (agg.error) {
        const ev = execution.apply({ type: 'error', ...agg.error });
        await callback(opts.onError, ev.error);
    }
    execution.apply({ type: 'end', status: agg.status, duration_ms: agg.duration_ms, usage: agg.usage });
}
