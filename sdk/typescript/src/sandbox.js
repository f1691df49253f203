// `CodeSandbox`: one Lizard sandbox and everything a client does with it — lifecycle (create,
// connect, pause, resume, kill, timeout, info), contexts, `runCode` (always streamed, callbacks as
// frames arrive), the Cloudflare-style aliases (`createCodeContext`, …), `exec` for shell
// commands, and the `commands` (commands.js), `pty` (pty.js) and `files` (files.js) namespaces. It does not
// re-implement the wire types: they are the server's (see crates/lizard-proto), converted to
// camelCase at this boundary (convert.js).

import { Commands } from './commands.js';
import { Execution } from './execution.js';
import { Files } from './files.js';
import { Pty } from './pty.js';
import { HttpClient, NDJSON, ndjsonFrames, resolveConfig } from './http.js';
import { volumeMountsBody } from './volumes.js';
import { snapshotId } from './snapshots.js';
import { toContext, toForkedContext, toInfo, toNetworkLog, toSnapshotInfo } from './convert.js';
import {
  ConnectionError,
  InvalidArgumentError,
  LizardError,
  NotFoundError,
  SandboxError,
  TimeoutError,
} from './errors.js';

/** The template `create` uses when none is given. */
export const DEFAULT_TEMPLATE = 'code-interpreter-v1';

const enc = encodeURIComponent;

function isPlainObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function stringMap(value, what) {
  if (value === undefined || value === null) return undefined;
  if (!isPlainObject(value)) throw new InvalidArgumentError(`${what} must be an object of strings`);
  const out = {};
  for (const [k, v] of Object.entries(value)) {
    if (v === undefined) continue;
    out[k] = String(v);
  }
  return Object.keys(out).length ? out : undefined;
}

function positiveInt(value, what) {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidArgumentError(`${what} must be a positive number of milliseconds`);
  }
  return Math.ceil(value);
}

/** `onTimeout` as the wire's `on_timeout`. */
function onTimeoutBody(value) {
  if (value === undefined || value === null) return undefined;
  if (value !== 'kill' && value !== 'pause') throw new InvalidArgumentError("onTimeout must be 'kill' or 'pause'");
  return value;
}

/** `ctx` as an id: a context object (`{ id }`) or its id. */
function contextId(ctx, what = 'context') {
  if (typeof ctx === 'string' && ctx) return ctx;
  if (isPlainObject(ctx) && typeof ctx.id === 'string' && ctx.id) return ctx.id;
  throw new InvalidArgumentError(`${what} must be a context object or a context id`);
}

function limitsBody(limits) {
  if (limits === undefined || limits === null) return undefined;
  if (!isPlainObject(limits)) throw new InvalidArgumentError('limits must be an object');
  const body = {
    memory_mb: limits.memoryMb,
    cpu_millicores: limits.cpuMillicores,
    pids: limits.pids,
    tmp_mb: limits.tmpMb,
    disk_mb: limits.diskMb,
  };
  for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
  return body;
}

/**
 * `'none'`, `'all'`, a list of destinations (allowed) or `{ allow?, deny? }` → the wire form of
 * `network.egress`.
 */
function egressBody(egress) {
  const strings = (v) => Array.isArray(v) && v.every((d) => typeof d === 'string');
  if (egress === 'none' || egress === 'all') return egress;
  if (strings(egress)) return { allow: [...egress] };
  if (isPlainObject(egress)) {
    const unknown = Object.keys(egress).filter((k) => k !== 'allow' && k !== 'deny' && egress[k] !== undefined);
    const ok = (v) => v === undefined || strings(v);
    if (!unknown.length && ok(egress.allow) && ok(egress.deny)) {
      const out = {};
      if (egress.allow !== undefined) out.allow = [...egress.allow];
      if (egress.deny !== undefined) out.deny = [...egress.deny];
      return out;
    }
  }
  throw new InvalidArgumentError(
    "egress must be 'none', 'all', an array of destinations or { allow?: string[], deny?: string[] }",
  );
}

/**
 * `[{ host, headers: { Name: 'template' } }]` → the wire form of `network.inject` (the same
 * shape; header names and `${secret:NAME}` templates are the caller's, sent as they are).
 */
function injectBody(inject) {
  const rule = (r) =>
    isPlainObject(r) &&
    typeof r.host === 'string' &&
    Object.keys(r).every((k) => k === 'host' || k === 'headers') &&
    isPlainObject(r.headers) &&
    Object.values(r.headers).every((v) => typeof v === 'string');
  if (!Array.isArray(inject) || !inject.every(rule)) {
    throw new InvalidArgumentError(
      "inject must be an array of { host: 'api.example.com', headers: { Authorization: 'Bearer ${secret:NAME}' } }",
    );
  }
  return inject.map((r) => ({ host: r.host, headers: { ...r.headers } }));
}

/** `create`'s `egress` and `inject` → the request's `network` (absent when neither is given). */
function networkBody(egress, inject) {
  const noEgress = egress === undefined || egress === null;
  const noInject = inject === undefined || inject === null;
  if (noEgress && noInject) return undefined;
  if (noEgress) {
    throw new InvalidArgumentError('inject needs egress to its hosts: give egress as well (e.g. egress: [host])');
  }
  return { egress: egressBody(egress), ...(noInject ? {} : { inject: injectBody(inject) }) };
}

/** Call a user callback; await it when it returns a promise, so callbacks run in frame order. */
async function callback(fn, ...args) {
  if (typeof fn !== 'function') return;
  const r = fn(...args);
  if (r && typeof r.then === 'function') await r;
}

/**
 * A Lizard sandbox with stateful Python, JavaScript and Bash kernels.
 *
 * Get one with {@link CodeSandbox.create} or {@link CodeSandbox.connect}. Connection settings come
 * from the options (`apiUrl`, `apiKey`) or the environment (`LIZARD_API_URL`, `LIZARD_API_KEY`).
 */
export class CodeSandbox {
  /**
   * Use {@link CodeSandbox.create} or {@link CodeSandbox.connect} instead.
   * @param {string} sandboxId
   * @param {HttpClient} http
   * @param {object} [info] the wire `SandboxInfo` the sandbox was obtained with
   */
  constructor(sandboxId, http, info) {
    if (!(http instanceof HttpClient)) {
      throw new InvalidArgumentError('use CodeSandbox.create(...) or CodeSandbox.connect(id) to get a sandbox');
    }
    /** The sandbox's id (pass it to `CodeSandbox.connect` later). */
    this.sandboxId = sandboxId;
    Object.defineProperty(this, '_http', { value: http });
    Object.defineProperty(this, '_info', { value: info ? toInfo(info) : undefined, writable: true });
    /** Shell commands and processes: `run`, `list`, `connect`, `kill`. */
    Object.defineProperty(this, 'commands', { value: new Commands(this), enumerable: true });
    /** Interactive terminals: `create`, `connect`, `sendInput`, `resize`, `kill`. */
    Object.defineProperty(this, 'pty', { value: new Pty(this), enumerable: true });
    /** The sandbox's filesystem: `read`, `write`, `list`, `watchDir`, … */
    Object.defineProperty(this, 'files', { value: new Files(this), enumerable: true });
  }

  /**
   * Create a sandbox (`POST /v1/sandboxes`).
   * @param {import('./index.js').CreateOptions} [opts]
   * @returns {Promise<CodeSandbox>}
   */
  static async create(opts = {}) {
    if (!isPlainObject(opts)) throw new InvalidArgumentError('CodeSandbox.create takes an options object');
    if (opts.snapshot !== undefined && opts.snapshot !== null) return CodeSandbox._fromSnapshot(opts);
    const body = {
      project: opts.project,
      template: opts.template ?? DEFAULT_TEMPLATE,
      timeout_ms: positiveInt(opts.timeoutMs, 'timeoutMs'),
      on_timeout: onTimeoutBody(opts.onTimeout),
      metadata: stringMap(opts.metadata, 'metadata'),
      env: stringMap(opts.envs, 'envs'),
      limits: limitsBody(opts.limits),
      volumes: volumeMountsBody(opts.volumes),
      network: networkBody(opts.egress, opts.inject),
    };
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    const http = new HttpClient(resolveConfig(opts));
    const info = await http.json('POST', '/v1/sandboxes', body);
    return new CodeSandbox(info.sandbox_id, http, info);
  }

  /** `create({ snapshot })`: a clone; only its own lifetime and labels may be given. */
  static async _fromSnapshot(opts) {
    const id = snapshotId(opts.snapshot);
    for (const k of ['template', 'envs', 'limits', 'volumes', 'egress', 'inject']) {
      if (opts[k] !== undefined) {
        throw new InvalidArgumentError(
          `a sandbox from a snapshot has the snapshot's template, envs, limits, volumes and network: ${k} cannot be given with snapshot`,
        );
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
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    const http = new HttpClient(resolveConfig(opts));
    const info = await http.json('POST', '/v1/sandboxes', body);
    return new CodeSandbox(info.sandbox_id, http, info);
  }

  /**
   * Connect to an existing sandbox by id, resuming it if it is paused or hibernated (then
   * `sandbox.restoreReport` says what each context got back and what was lost).
   * @param {string} sandboxId
   * @param {import('./index.js').ConnectionOptions} [opts]
   * @returns {Promise<CodeSandbox>}
   */
  static async connect(sandboxId, opts = {}) {
    if (typeof sandboxId !== 'string' || !sandboxId) {
      throw new InvalidArgumentError('CodeSandbox.connect takes a sandbox id');
    }
    const http = new HttpClient(resolveConfig(opts));
    let info = await http.json('GET', `/v1/sandboxes/${enc(sandboxId)}`);
    if (info.state === 'killed') {
      throw new NotFoundError(`sandbox ${sandboxId} was killed`, { code: 'not_found', status: 404 });
    }
    if (info.state === 'paused' || info.state === 'hibernated') {
      info = await http.json('POST', `/v1/sandboxes/${enc(sandboxId)}/resume`);
    }
    return new CodeSandbox(sandboxId, http, info);
  }

  /**
   * List the sandboxes this key can see, newest first.
   * @param {import('./index.js').ListOptions} [opts]
   * @returns {Promise<import('./index.js').SandboxInfo[]>}
   */
  static async list(opts = {}) {
    const http = new HttpClient(resolveConfig(opts));
    const q = new URLSearchParams();
    if (opts.project) q.set('project', opts.project);
    if (opts.state) q.set('state', opts.state);
    const meta = stringMap(opts.metadata, 'metadata');
    if (meta) {
      q.set(
        'metadata',
        Object.entries(meta)
          .map(([k, v]) => `${k}=${v}`)
          .join(','),
      );
    }
    const qs = q.toString();
    const list = await http.json('GET', `/v1/sandboxes${qs ? `?${qs}` : ''}`);
    return list.map(toInfo);
  }

  /**
   * Kill a sandbox by id. Resolves to `true` if it was killed, `false` if it did not exist.
   * @param {string} sandboxId
   * @param {import('./index.js').ConnectionOptions} [opts]
   */
  static async kill(sandboxId, opts = {}) {
    const http = new HttpClient(resolveConfig(opts));
    try {
      await http.json('DELETE', `/v1/sandboxes/${enc(sandboxId)}`);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  get _base() {
    return `/v1/sandboxes/${enc(this.sandboxId)}`;
  }

  // ---- lifecycle ----------------------------------------------------------------------------

  /** The sandbox's current state, template, limits and timeout (`GET /v1/sandboxes/{id}`). */
  /**
   * The URL at which a service listening on `port` inside the sandbox is reachable (HTTP and
   * WebSocket), proxied by the server. Requests to it need this SDK's API key as a bearer token
   * (`Authorization: Bearer …`); nothing listens on the host's network for it.
   * @param {number} port
   * @returns {string}
   */
  getHost(port) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new InvalidArgumentError(`port must be an integer in 1..65535, got ${port}`);
    }
    return `${this._http.config.apiUrl}${this._base}/ports/${port}`;
  }

  /**
   * After a resume from hibernation (`resume()` or `connect`), and in a sandbox made from a
   * snapshot or by `fork()`: what each context got back and what was lost.
   */
  get restoreReport() {
    return this._info?.restore;
  }

  async getInfo() {
    this._info = toInfo(await this._http.json('GET', this._base));
    return this._info;
  }

  /** Whether the sandbox is running (not paused, not killed). */
  async isRunning() {
    try {
      return (await this.getInfo()).state === 'running';
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /**
   * Kill the sandbox and everything in it. Resolves to `true` if it was killed, `false` if it was
   * already gone.
   */
  async kill() {
    try {
      await this._http.json('DELETE', this._base);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /**
   * Freeze every process of the sandbox; kernels keep their state and the timeout stops counting.
   * While paused, code cannot run (a `ConflictError`); `resume()` or `CodeSandbox.connect(id)`
   * continues it.
   */
  async pause() {
    this._info = toInfo(await this._http.json('POST', `${this._base}/pause`));
    return this._info;
  }

  /**
   * Continue a paused sandbox where it stopped, or relaunch a hibernated one and restore its
   * contexts (`info.restore` then lists, per context, what was restored and what was lost, with
   * the reason). Idempotent.
   */
  async resume() {
    this._info = toInfo(await this._http.json('POST', `${this._base}/resume`));
    return this._info;
  }

  /**
   * Hibernate: every context saves its state to disk and the sandbox's processes stop, so it holds
   * no memory and survives a server restart. `info.hibernation` lists, per context, what was saved
   * and what cannot be (generators, sockets, threads...). `resume()` or `CodeSandbox.connect(id)`
   * brings it back. Idempotent.
   */
  async hibernate() {
    this._info = toInfo(await this._http.json('POST', `${this._base}/hibernate`));
    return this._info;
  }

  /**
   * Save a snapshot of the sandbox — its kernels' state (as `method` says; `contexts` lists per
   * context what was saved and what cannot be) and a copy of its disk — which new sandboxes start
   * from with `CodeSandbox.create({ snapshot })`. The sandbox keeps running (a paused one stays
   * paused); a hibernated one is refused (`ConflictError`). The snapshot lives until deleted
   * (`Snapshots.delete`).
   * @param {import('./index.js').CreateSnapshotOptions} [opts]
   * @returns {Promise<import('./index.js').SnapshotInfo>}
   */
  async createSnapshot(opts = {}) {
    if (!isPlainObject(opts)) throw new InvalidArgumentError('createSnapshot takes an options object');
    const body = {};
    const metadata = stringMap(opts.metadata, 'metadata');
    if (metadata) body.metadata = metadata;
    return toSnapshotInfo(await this._http.json('POST', `${this._base}/snapshots`, body));
  }

  /**
   * Fork the sandbox: a new running sandbox with this one's kernels' state and files (a snapshot
   * that is not kept), connected with the same settings. This one keeps running.
   * `fork.restoreReport` says what each context got back.
   * @param {import('./index.js').ForkOptions} [opts]
   * @returns {Promise<CodeSandbox>}
   */
  async fork(opts = {}) {
    if (!isPlainObject(opts)) throw new InvalidArgumentError('fork takes an options object');
    const body = {};
    const timeoutMs = positiveInt(opts.timeoutMs, 'timeoutMs');
    if (timeoutMs !== undefined) body.timeout_ms = timeoutMs;
    const metadata = stringMap(opts.metadata, 'metadata');
    if (metadata) body.metadata = metadata;
    const info = await this._http.json('POST', `${this._base}/fork`, body);
    return new CodeSandbox(info.sandbox_id, this._http, info);
  }

  /**
   * Set the sandbox's lifetime to `timeoutMs` from now (the server kills it when it passes).
   * @param {number} timeoutMs
   */
  async setTimeout(timeoutMs) {
    const ms = positiveInt(timeoutMs, 'timeoutMs');
    if (ms === undefined) throw new InvalidArgumentError('setTimeout takes a number of milliseconds');
    this._info = toInfo(await this._http.json('POST', `${this._base}/timeout`, { timeout_ms: ms }));
    return this._info;
  }

  /**
   * Replace the sandbox's egress rules and/or header injection rules, live: its next connection
   * and DNS query are decided by them, its next request to an `inject` host gets the headers
   * with the secrets' current values (`PATCH /v1/sandboxes/{id}/network`). `egress` and
   * `inject` take the same forms as at create; the one not given is kept as it is (read from
   * the server first); `inject: []` removes every injection rule. `'none'` is kept as
   * `{ allow: [] }`. Only a sandbox created with egress can be changed (a `ConflictError`
   * otherwise: create it with `egress: { allow: [] }` to open it later); rules that open
   * anything need an admin key or a project with `allow_egress` (else an `AuthenticationError`
   * with code `permission_denied`); a bad entry, an inject host the egress does not allow or an
   * unknown secret is an `InvalidArgumentError` naming it.
   * @param {import('./index.js').SetNetworkOptions} opts
   */
  async setNetwork(opts) {
    const given = (v) => v !== undefined && v !== null;
    if (!isPlainObject(opts) || (!given(opts.egress) && !given(opts.inject))) {
      throw new InvalidArgumentError('setNetwork takes { egress?, inject? } (at least one)');
    }
    // The server keeps the part not given.
    const body = {};
    if (given(opts.egress)) body.egress = egressBody(opts.egress);
    if (given(opts.inject)) body.inject = injectBody(opts.inject);
    this._info = toInfo(await this._http.json('PATCH', `${this._base}/network`, body));
    return this._info;
  }

  /**
   * What the sandbox did through the package registries' mirror and its egress since its
   * processes last started, and what was refused (`GET /v1/sandboxes/{id}/network/log`).
   */
  async networkLog() {
    return toNetworkLog(await this._http.json('GET', `${this._base}/network/log`));
  }

  // ---- contexts -------------------------------------------------------------------------------

  /**
   * Create a context: an independent kernel (its own variables) in this sandbox.
   * @param {import('./index.js').CreateContextOptions} [opts]
   */
  async createContext(opts = {}) {
    const body = {};
    if (opts.language !== undefined) body.language = opts.language;
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.limits !== undefined) {
      const l = opts.limits;
      body.limits = {};
      if (l.memoryMb !== undefined) body.limits.memory_mb = l.memoryMb;
      if (l.cpuMillicores !== undefined) body.limits.cpu_millicores = l.cpuMillicores;
    }
    return toContext(await this._http.json('POST', `${this._base}/contexts`, body));
  }

  /** Every context of the sandbox, the default ones included. */
  async listContexts() {
    const list = await this._http.json('GET', `${this._base}/contexts`);
    return list.map(toContext);
  }

  /** One context by id or object. */
  async getContext(ctx) {
    return toContext(await this._http.json('GET', `${this._base}/contexts/${enc(contextId(ctx))}`));
  }

  /** Replace the context's kernel with a fresh one: all its variables and state are cleared. */
  async restartContext(ctx) {
    return toContext(await this._http.json('POST', `${this._base}/contexts/${enc(contextId(ctx))}/restart`));
  }

  /**
   * Fork a context: a new context in this sandbox holding a copy of `ctx`'s live kernel (its
   * variables, functions and imports; copy-on-write, nothing serialised). The fork continues from
   * the source's execution count; what a fork cannot carry (other threads, background jobs,
   * pending tasks) is listed in `lost`. A source running a cell → `ConflictError`.
   * @param {import('./index.js').ContextRef} ctx
   * @param {import('./index.js').ForkContextOptions} [opts]
   */
  async forkContext(ctx, opts = {}) {
    const body = {};
    if (opts.limits !== undefined) {
      const l = opts.limits;
      body.limits = {};
      if (l.memoryMb !== undefined) body.limits.memory_mb = l.memoryMb;
      if (l.cpuMillicores !== undefined) body.limits.cpu_millicores = l.cpuMillicores;
    }
    const w = await this._http.json('POST', `${this._base}/contexts/${enc(contextId(ctx))}/fork`, body);
    return toForkedContext(w);
  }

  /** Interrupt the cell running in the context (SIGINT; the state is kept). */
  async interruptContext(ctx) {
    await this._http.json('POST', `${this._base}/contexts/${enc(contextId(ctx))}/interrupt`);
  }

  /** Delete the context and stop its kernel. */
  async deleteContext(ctx) {
    await this._http.json('DELETE', `${this._base}/contexts/${enc(contextId(ctx))}`);
  }

  /** Cloudflare-style alias of {@link CodeSandbox#createContext}: resolves to `{ id, language, … }`. */
  createCodeContext(opts = {}) {
    return this.createContext(opts);
  }

  /** Cloudflare-style alias of {@link CodeSandbox#listContexts}. */
  listCodeContexts() {
    return this.listContexts();
  }

  /** Cloudflare-style alias of {@link CodeSandbox#deleteContext}. */
  deleteCodeContext(ctx) {
    return this.deleteContext(ctx);
  }

  // ---- running code ---------------------------------------------------------------------------

  /**
   * Run a cell and stream its events: callbacks are called as frames arrive, and the promise
   * resolves to the whole {@link Execution} when the cell ends. A failing cell does not reject:
   * its error is `execution.error`.
   *
   * Without `context` or `language` the cell runs in the default Python context. Passing both
   * throws an `InvalidArgumentError` before any request.
   *
   * @param {string} code
   * @param {import('./index.js').RunCodeOptions} [opts]
   * @returns {Promise<Execution>}
   */
  async runCode(code, opts = {}) {
    if (typeof code !== 'string') throw new InvalidArgumentError('runCode takes the code as a string');
    if (!isPlainObject(opts)) throw new InvalidArgumentError('runCode options must be an object');
    const hasContext = opts.context !== undefined && opts.context !== null;
    const hasLanguage = opts.language !== undefined && opts.language !== null;
    if (hasContext && hasLanguage) {
      throw new InvalidArgumentError(
        'pass either `context` or `language` to runCode, not both: a context already has a language',
      );
    }
    const body = { code };
    if (hasContext) body.context = contextId(opts.context);
    if (hasLanguage) {
      if (typeof opts.language !== 'string') throw new InvalidArgumentError('language must be a string');
      body.language = opts.language;
    }
    const env = stringMap(opts.envs, 'envs');
    if (env) body.env = env;
    const timeoutMs = positiveInt(opts.timeoutMs, 'timeoutMs');
    if (timeoutMs !== undefined) body.timeout_ms = timeoutMs;

    // Our own controller, so a callback that throws closes the stream (the server then interrupts
    // the cell) even when the caller gave no signal.
    const ctrl = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, ctrl.signal]) : ctrl.signal;
    const { res } = await this._http.send('POST', `${this._base}/execute`, {
      body,
      accept: NDJSON,
      signal,
      timeoutMs: opts.requestTimeoutMs ?? null,
    });

    const execution = new Execution();
    const contentType = res.headers.get('content-type') ?? '';
    if (!contentType.includes(NDJSON)) {
      // A server that answered with the aggregated execution instead of a stream.
      await foldAggregate(execution, await res.json(), opts);
      return execution;
    }
    let ended = false;
    let callbackFailed = false;
    const call = async (fn, ...args) => {
      try {
        await callback(fn, ...args);
      } catch (err) {
        callbackFailed = true;
        throw err;
      }
    };
    try {
      for await (const frame of ndjsonFrames(res.body)) {
        const ev = execution.apply(frame);
        if (!ev) continue;
        switch (ev.kind) {
          case 'stdout':
            await call(opts.onStdout, ev.text);
            await call(opts.onOutput, ev.text, 'stdout');
            break;
          case 'stderr':
            await call(opts.onStderr, ev.text);
            await call(opts.onOutput, ev.text, 'stderr');
            break;
          case 'result':
            await call(opts.onResult, ev.result);
            break;
          case 'error':
            await call(opts.onError, ev.error);
            break;
          case 'end':
            ended = true;
            break;
        }
      }
    } catch (err) {
      ctrl.abort(err);
      if (callbackFailed || err instanceof LizardError) throw err; // a callback's own error, as is
      if (opts.signal?.aborted && err === opts.signal.reason) throw err;
      if (err?.name === 'TimeoutError') {
        throw new TimeoutError(`the execution took longer than requestTimeoutMs (${opts.requestTimeoutMs} ms)`, {
          cause: err,
        });
      }
      throw new ConnectionError(`the connection broke during the execution: ${err?.message ?? err}`, {
        cause: err,
      });
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
   * Run one shell command (`bash -c command`, as `commands.run` does) and wait for it. Unlike
   * `commands.run`, a non-zero exit does not throw: it is `exitCode` (and `success: false`). Each
   * call is a new process: `cd` and `export` do not carry over to the next call. Past `timeout` (ms)
   * the command is stopped and `exec` throws a `TimeoutError` whose `result` has the output so far.
   * Output is also streamed to `onOutput(stream, text)` / `onStdout` / `onStderr`.
   *
   * @param {string} command
   * @param {import('./index.js').ExecOptions} [opts]
   * @returns {Promise<import('./index.js').ExecResult>}
   */
  async exec(command, opts = {}) {
    if (typeof command !== 'string') throw new InvalidArgumentError('exec takes the command as a string');
    if (!isPlainObject(opts)) throw new InvalidArgumentError('exec options must be an object');
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
