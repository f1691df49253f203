// `CodeSandbox`: one Lizard sandbox and everything a client does with it — lifecycle (create,
// connect, pause, resume, kill, timeout, info), contexts, `runCode` (always streamed, callbacks as
// frames arrive), the Cloudflare-style aliases (`createCodeContext`, …), `exec` for shell
// commands, and the `commands` (commands.ts), `pty` (pty.ts) and `files` (files.ts) namespaces. It does not
// re-implement the wire types: they are the server's (see crates/lizard-proto), converted to
// camelCase at this boundary (convert.ts).

import { Callbacks, Commands, callback, streamError } from './commands.js';
import type { CommandResult } from './commands.js';
import { Execution } from './execution.js';
import type { ExecutionError, Result } from './execution.js';
import { Files } from './files.js';
import { Pty } from './pty.js';
import { HttpClient, NDJSON, ndjsonFrames, resolveConfig } from './http.js';
import type { ConnectionOptions, Frame } from './http.js';
import { volumeMountsBody } from './volumes.js';
import type { SandboxVolume, VolumeMount } from './volumes.js';
import { snapshotId } from './snapshots.js';
import type { CreateSnapshotOptions, ForkOptions, SnapshotInfo, SnapshotMethod } from './snapshots.js';
import { toContext, toForkedContext, toInfo, toNetworkLog, toSnapshotInfo } from './convert.js';
import { InvalidArgumentError, NotFoundError, SandboxError, TimeoutError } from './errors.js';
import type { components } from './wire.js';

type W = components['schemas'];
type WireSchemas = W;

/** The template `create` uses when none is given: `'code-interpreter-v1'`. */
export const DEFAULT_TEMPLATE: string = 'code-interpreter-v1';

const enc = encodeURIComponent;

// ---- configuration -------------------------------------------------------------------------------

/** Resource limits of a sandbox. */
export interface SandboxLimits {
  /** Memory of all processes (including `/tmp`), in MiB. Server default 1024. */
  memoryMb: number;
  /** CPU time per wall second in thousandths of a core (1000 = one core). Server default 1000. */
  cpuMillicores: number;
  /** Processes and threads. Server default 512. */
  pids: number;
  /** Size of the `/tmp` tmpfs, in MiB. Server default 256. */
  tmpMb: number;
  /** Size of the writable layer (its own sparse disk), in MiB. Server default 1024. */
  diskMb: number;
}

/** Options of {@link CodeSandbox.create}. */
export interface CreateOptions extends ConnectionOptions {
  /** The project that owns the sandbox (usage is metered per project). An admin key creates the
   * project on first use; a project key may omit it (its own project). */
  project?: string;
  /** Template to boot from. Default `'code-interpreter-v1'`. */
  template?: string;
  /** Lifetime in ms; the server kills the sandbox when it passes (server default 300000). Extend it with `setTimeout`. */
  timeoutMs?: number;
  /** What the server does when the lifetime passes: `'kill'` (the default) or `'pause'` (frozen
   * with its state until resumed or killed). Also allowed with `snapshot`. */
  onTimeout?: TimeoutAction;
  /** Free-form string labels, filterable with {@link CodeSandbox.list}. */
  metadata?: Record<string, string>;
  /** Environment variables of every process in the sandbox. */
  envs?: Record<string, string>;
  /** Resource limits; server defaults for what is absent. */
  limits?: Partial<SandboxLimits>;
  /** Volumes of the project to mount (a name mounts at `/home/user/<name>`). */
  volumes?: Array<string | VolumeMount>;
  /** Internet egress (see {@link Egress}): `'all'`, a list of destinations the sandbox may
   * reach, or `{ allow?, deny? }` rules; loopback only when absent. Enforced on the host, by name
   * and address, at every connection and DNS query; change it later with `setNetwork` (only a
   * sandbox created with egress can be changed: give `{ allow: [] }` to start closed). Needs an
   * admin key or a project created with `allow_egress`. `pip install` and `npm install` need no
   * egress: every sandbox reaches the server's caching mirror of the package registries
   * (`lizard serve --package-registry`) and is pointed at it. */
  egress?: Egress;
  /** Headers the server adds to the sandbox's HTTP(S) requests to some hosts, with the project's
   * secrets ({@link Secrets}) substituted: `[{ host: 'api.example.com', headers: { Authorization:
   * 'Bearer ${secret:example}' } }]`. The values never enter the sandbox. Each host must be
   * allowed by `egress` (so `egress` is needed too). See {@link InjectRule}. */
  inject?: InjectRule[];
  /** Let anyone who can reach the server open the sandbox's own ports by host name,
   * `http://<port>-<sandbox id>.<sandbox domain>/` (`lizard serve --sandbox-domain`;
   * `localhost:<port>` by default), without its access token. Off unless asked. */
  publicPorts?: boolean;
  /** Resume the sandbox when a request reaches it while it is paused or hibernated (code, files,
   * commands, its ports), instead of failing with a {@link ConflictError}: E2B's `autoResume`.
   * Off unless asked. */
  autoResume?: boolean;
  /**
   * Start from a snapshot (its id or the {@link SnapshotInfo} of `createSnapshot()`): a clone with
   * the snapshot's disk and kernels' state (see {@link CodeSandbox.restoreReport}), template,
   * envs, limits, volumes and network (egress, inject) — those options cannot be given with it (an
   * `InvalidArgumentError`); `timeoutMs`, `onTimeout`, `metadata` and `project` can. A snapshot of another
   * project is a {@link NotFoundError}.
   */
  snapshot?: string | SnapshotInfo;
}

/**
 * One egress rule entry: `'example.com'` (that name only), `'*.example.com'` (any name below it,
 * not the name itself), `'api.example.com:443'`, `'1.2.3.4'`, `'1.2.3.4:8080'`, `'10.0.0.0/8'`
 * (optionally `:port`), `'*'` (every public address and name; `'*:443'`). Names are matched by
 * name (TLS SNI, HTTP Host, the name a DNS answer was given for) when the sandbox connects.
 * Private, loopback, link-local and the host's own addresses are reachable only through an
 * address rule (IPv4 or CIDR of at least /8), never through a name or `'*'`.
 */
export type EgressEntry = string;

/** Egress rules: deny beats allow; without `allow` (only `deny`) everything public is allowed
 * but what `deny` names; `{ allow: [] }` allows nothing. At most 256 entries in all. */
export interface EgressRules {
  allow?: EgressEntry[];
  deny?: EgressEntry[];
}

/** A sandbox's egress: `'none'` (loopback only), `'all'` (any public address and name), a list
 * of allowed destinations (the same as `{ allow: list }`), or rules. */
export type Egress = 'none' | 'all' | EgressEntry[] | EgressRules;

/**
 * One header injection rule: the sandbox's requests to `host` get `headers` set (replacing any
 * it sent with the same name), each value a template in which `${secret:NAME}` is the project's
 * secret NAME and `$$` a literal `$`. The server's egress relay adds them on the way out, so the
 * values are never in the sandbox's environment, files or memory; for HTTPS it terminates TLS
 * for these hosts only, with a certificate of the sandbox's own CA, which the sandbox's tools
 * trust (`SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`, `NODE_EXTRA_CA_CERTS`). Every
 * use is an audit event `secret.use`.
 *
 * Limits: an upstream that echoes request headers back shows the value to the sandbox; a
 * plain-HTTP port sends it in clear; HTTP/1.1 only (HTTP/2 is negotiated down); WebSocket and
 * other upgrades are not passed. At most 16 rules of 16 headers each; reserved headers (`Host`,
 * `Connection`, `Content-Length`, …) are refused.
 */
export interface InjectRule {
  /** `'api.example.com'` or `'*.example.com'` (any name below it), optionally `':port'`;
   * without a port, 443 (HTTPS) only. Must be allowed by the sandbox's egress. */
  host: string;
  /** Header name → value template, e.g. `{ Authorization: 'Bearer ${secret:example}' }`. */
  headers: Record<string, string>;
}

/** A sandbox's network as {@link SandboxInfo} reports it (a list given at create comes back as
 * `{ allow }`; `'none'` set on a sandbox with egress comes back as `{ allow: [] }`). */
export interface SandboxNetwork {
  egress: 'none' | 'all' | EgressRules;
  /** Its header injection rules, as given — the templates, never the secrets' values (absent
   * when there are none). */
  inject?: InjectRule[];
  /** Whether its ports open by host name without its access token (absent: they do not). */
  publicPorts?: boolean;
  /** Whether a request resumes it when it is paused or hibernated (absent: it does not). */
  autoResume?: boolean;
}

/** Options of {@link CodeSandbox.setNetwork}: at least one; those not given are kept. */
export type SetNetworkOptions =
  | { egress: Egress; inject?: InjectRule[]; publicPorts?: boolean; autoResume?: boolean }
  | { egress?: Egress; inject: InjectRule[]; publicPorts?: boolean; autoResume?: boolean }
  | { egress?: Egress; inject?: InjectRule[]; publicPorts: boolean; autoResume?: boolean }
  | { egress?: Egress; inject?: InjectRule[]; publicPorts?: boolean; autoResume: boolean };

/** One refused request in {@link NetworkLog}. */
export interface RefusedRequest {
  at: Date;
  /** The HTTP method for the mirror's refusals; `'connect'` (a TCP connection) or `'dns'` (a
   * DNS query) for egress's. */
  method: string;
  /** `host:port` or the request target, as the sandbox sent it (at most 256 bytes). */
  destination: string;
  /** Why (egress refusals). */
  reason?: string;
}

/** What a sandbox did through the package registries' mirror and its egress since its processes
 * last started (a create, resume, clone or server restart begins anew), and what was refused:
 * the mirror's newest 64, then egress's newest 256, each oldest first. */
export interface NetworkLog {
  sandboxId: string;
  mirror: {
    /** Every request, refused ones included. */
    requests: number;
    /** Downloads served from the host's cache. */
    cacheHits: number;
    /** Downloads fetched from a registry. */
    cacheMisses: number;
    /** Requests refused. */
    refused: number;
    /** Body bytes fetched from registries for it. */
    upstreamBytes: number;
    /** Body bytes sent to it. */
    servedBytes: number;
    /** Connections closed at once (over its budget). */
    rejectedConnections: number;
  };
  /** Its egress relay's traffic (all zero without egress). */
  egress: {
    /** Connections relayed (upstream reached). */
    connections: number;
    /** Bytes from the sandbox to upstreams. */
    bytesOut: number;
    /** Bytes from upstreams to the sandbox. */
    bytesIn: number;
    /** Connections and DNS queries refused. */
    refused: number;
  };
  refused: RefusedRequest[];
}

/** Options of {@link CodeSandbox.list}. */
export interface ListOptions extends ConnectionOptions {
  project?: string;
  state?: 'running' | 'paused' | 'hibernated';
  /** Only sandboxes whose metadata has all these pairs. */
  metadata?: Record<string, string>;
}

/** Lifecycle state of a sandbox: `'running'`, `'paused'`, `'hibernated'` or `'killed'`. */
export type SandboxState = WireSchemas['SandboxState'];

/** What the server does with a sandbox whose timeout passed: `'kill'` or `'pause'`. */
export type TimeoutAction = WireSchemas['TimeoutAction'];

/** One item of a context's state that was saved or restored. */
export interface StateItem {
  /** Variable, function, class, module alias or alias name; the path for `cwd`. */
  name: string;
  /** `variable`, `function`, `class`, `module`, `alias` or `cwd`. */
  kind: string;
}

/** What happened to one context's state at hibernation or at the resume after it. */
export interface ContextReport {
  id: string;
  language: Language;
  /** Saved (in `hibernation`) or restored (in `restore`). */
  restored: StateItem[];
  /** What did not survive, with the reason (generators, sockets, threads, ...). */
  lost: { name: string; reason: string }[];
}

/** How kernel state was carried across hibernation (or into a snapshot or fork), per context. */
export interface HibernationReport {
  /** `criu`: every process of the sandbox was checkpointed and restored exactly; `per-language`:
   * each kernel saved and reloaded its own state. */
  method: SnapshotMethod;
  /** Why this method (e.g. no CRIU >= 4.1 on the host). */
  methodReason: string;
  contexts: ContextReport[];
}

/** A sandbox as the server reports it. */
export interface SandboxInfo {
  sandboxId: string;
  project: string;
  template: string;
  state: SandboxState;
  createdAt: Date;
  /** When the server kills (or, with `onTimeout: 'pause'`, pauses) the sandbox unless its timeout is extended. */
  timeoutAt: Date;
  /** What happens when `timeoutAt` passes. */
  onTimeout: TimeoutAction;
  metadata: Record<string, string>;
  limits?: SandboxLimits;
  /** Mounted volumes. */
  volumes: SandboxVolume[];
  /** Its network: the egress it was created with, or the rules last set with `setNetwork`. */
  network: SandboxNetwork;
  /** In the answer of `hibernate()`: what each context saved and what it could not. */
  hibernation?: HibernationReport;
  /** In the answer of a resume from hibernation: what each context got back and what was lost. */
  restore?: HibernationReport;
}

// ---- contexts ------------------------------------------------------------------------------------

/** Kernel languages. The server also accepts the aliases `py`, `python3`, `js`, `node`, `sh`, `shell`. */
export type Language = 'python' | 'javascript' | 'bash' | (string & {});

/** A context: one kernel process with its own variables, inside a sandbox. */
export interface Context {
  /** Opaque id; pass the object or the id as `runCode`'s `context`. */
  id: string;
  /** Canonical language name: `python`, `javascript` or `bash`. */
  language: 'python' | 'javascript' | 'bash';
  /** Working directory of the kernel. */
  cwd: string;
  /** True for the context a run with only `language` uses. */
  isDefault: boolean;
  /** `idle`, or `busy` while a cell runs. */
  state: 'idle' | 'busy';
  /** Cells run by the current kernel (resets when the kernel restarts). */
  executionCount: number;
  /** How many times the kernel was replaced by a fresh one (each loses the state). */
  kernelRestarts: number;
  /** Why the kernel was last replaced, when it was. */
  lastRestartReason?: string;
  /** The limits the context was created with, if any. */
  limits?: ContextLimits;
  /** Memory charged to the context's own cgroup (kernel and its children) now, in bytes. */
  memoryBytes?: number;
}

/**
 * Limits of one context's own cgroup (its kernel and the kernel's children), at most the
 * sandbox's. A context over its memory limit loses its kernel alone (the run ends with a
 * `KernelDied` error, the context gets a fresh kernel, other contexts keep their state).
 */
export interface ContextLimits {
  /** Memory in MiB (at least 16). */
  memoryMb?: number;
  /** CPU in thousandths of a CPU (1000 = one CPU; at least 10). */
  cpuMillicores?: number;
}

/** A context or its id. */
export type ContextRef = Context | { id: string } | string;

/** Options of {@link CodeSandbox.createContext}. */
export interface CreateContextOptions {
  /** Default `'python'`. */
  language?: Language;
  /** Working directory of the kernel. Default `/home/user`. */
  cwd?: string;
  /** Limits of the context's own cgroup; above the sandbox's limits → `InvalidArgumentError`. */
  limits?: ContextLimits;
}

export interface ForkContextOptions {
  /** Limits of the fork's own cgroup; default: the source's. Above the sandbox's → `InvalidArgumentError`. */
  limits?: ContextLimits;
  /**
   * `true`: the fork must carry everything (threads, child processes, listening servers) — a
   * checkpoint of the kernel's processes, or `ConflictError` when the server cannot make one.
   * `false`: a live fork only (fastest; what it loses is in `lost`). Default: exact when the
   * server can checkpoint and a live fork would lose something.
   */
  exact?: boolean;
}

/** A context made by {@link CodeSandbox.forkContext}. */
export interface ForkedContext extends Context {
  /** Id of the context it was forked from. */
  forkedFrom: string;
  /** What the fork could not carry (threads other than the kernel's, background jobs, …), with why. */
  lost: { name: string; reason: string }[];
  /** `'live'` (fork(2) of the kernel) or `'checkpoint'` (its processes checkpointed and restored). */
  method: 'live' | 'checkpoint';
  /** Why a live fork that loses something was made instead of a checkpoint. */
  checkpointError?: string;
}

// ---- runCode -------------------------------------------------------------------------------------

/** An execution stream's final frame. */
const isEndFrame = (frame: Frame): boolean => frame.type === 'end';

/** Options of {@link CodeSandbox.runCode}. Pass `context` or `language`, not both. */
export interface RunCodeOptions {
  /** Run in this language's default context. Default: Python (when `context` is not given either). */
  language?: Language;
  /** Run in this context (object or id). */
  context?: ContextRef;
  /** Environment variables visible to this run only. */
  envs?: Record<string, string>;
  /** Stop the cell after this many ms: it then ends with `status === 'timeout'` and a `Timeout` error; the state is kept. */
  timeoutMs?: number;
  /** Cloudflare-style flag; accepted and ignored: `runCode` always streams. */
  stream?: boolean;
  /** Each stdout chunk as it arrives (chunks are not lines). */
  onStdout?: (text: string) => unknown;
  /** Each stderr chunk as it arrives. */
  onStderr?: (text: string) => unknown;
  /** Cloudflare-style: each stdout or stderr chunk as it arrives, in arrival order. */
  onOutput?: (text: string, stream: 'stdout' | 'stderr') => unknown;
  /** Each rich result as it arrives. */
  onResult?: (result: Result) => unknown;
  /** The cell's error, when it fails. */
  onError?: (error: ExecutionError) => unknown;
  /** Abort the run: the connection closes and the server interrupts the cell. */
  signal?: AbortSignal;
  /** Client-side deadline of the whole streamed request, in ms. Default: none. */
  requestTimeoutMs?: number;
}

// ---- exec ----------------------------------------------------------------------------------------

/** Options of {@link CodeSandbox.exec}. */
export interface ExecOptions {
  /** Environment variables for this command only. */
  env?: Record<string, string>;
  /** Run in this directory (relative paths start at `/home/user`, the default). */
  cwd?: string;
  /** Stop the command after this many ms; `exec` then throws a `TimeoutError` (with `.result`). */
  timeout?: number;
  /** Same as `timeout`. */
  timeoutMs?: number;
  /** Same as `env`. */
  envs?: Record<string, string>;
  /** Cloudflare-style flag; accepted and ignored: output is always streamed to the callbacks. */
  stream?: boolean;
  /** Cloudflare-style: each output chunk as it arrives. */
  onOutput?: (stream: 'stdout' | 'stderr', data: string) => unknown;
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
  /** Abort the command (the server interrupts it). */
  signal?: AbortSignal;
}

/** What {@link CodeSandbox.exec} resolves to. */
export interface ExecResult {
  /** `exitCode === 0`. */
  success: boolean;
  /** The command's exit status (128 + the signal's number when a signal killed it). */
  exitCode: number;
  stdout: string;
  stderr: string;
  command: string;
  /** Wall time seen by the client, in ms. */
  duration: number;
  /** When the command was sent (ISO 8601). */
  timestamp: string;
}

// ---- helpers -------------------------------------------------------------------------------------

function isPlainObject<T>(v: T): v is T & Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function stringMap(value: unknown, what: string): Record<string, string> | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isPlainObject(value)) throw new InvalidArgumentError(`${what} must be an object of strings`);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (v === undefined) continue;
    out[k] = String(v);
  }
  return Object.keys(out).length ? out : undefined;
}

function positiveInt(value: unknown, what: string): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidArgumentError(`${what} must be a positive number of milliseconds`);
  }
  return Math.ceil(value);
}

/** `onTimeout` as the wire's `on_timeout`. */
function onTimeoutBody(value: unknown): TimeoutAction | undefined {
  if (value === undefined || value === null) return undefined;
  if (value !== 'kill' && value !== 'pause') throw new InvalidArgumentError("onTimeout must be 'kill' or 'pause'");
  return value;
}

/** `ctx` as an id: a context object (`{ id }`) or its id. */
function contextId(ctx: unknown, what = 'context'): string {
  if (typeof ctx === 'string' && ctx) return ctx;
  if (isPlainObject(ctx) && typeof ctx.id === 'string' && ctx.id) return ctx.id;
  throw new InvalidArgumentError(`${what} must be a context object or a context id`);
}

/** Drop the keys whose value is `undefined` (the server's defaults apply to them). */
function dropUndefined(body: Record<string, unknown>): void {
  for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
}

function limitsBody(limits: unknown): Record<string, unknown> | undefined {
  if (limits === undefined || limits === null) return undefined;
  if (!isPlainObject(limits)) throw new InvalidArgumentError('limits must be an object');
  const body: Record<string, unknown> = {
    memory_mb: limits.memoryMb,
    cpu_millicores: limits.cpuMillicores,
    pids: limits.pids,
    tmp_mb: limits.tmpMb,
    disk_mb: limits.diskMb,
  };
  dropUndefined(body);
  return body;
}

function contextLimitsBody(l: ContextLimits): { memory_mb?: number; cpu_millicores?: number } {
  const out: { memory_mb?: number; cpu_millicores?: number } = {};
  if (l.memoryMb !== undefined) out.memory_mb = l.memoryMb;
  if (l.cpuMillicores !== undefined) out.cpu_millicores = l.cpuMillicores;
  return out;
}

function isStrings(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((d) => typeof d === 'string');
}

/**
 * `'none'`, `'all'`, a list of destinations (allowed) or `{ allow?, deny? }` → the wire form of
 * `network.egress`.
 */
function egressBody(egress: unknown): W['Egress'] {
  if (egress === 'none' || egress === 'all') return egress;
  if (isStrings(egress)) return { allow: [...egress] };
  if (isPlainObject(egress)) {
    const unknown = Object.keys(egress).filter((k) => k !== 'allow' && k !== 'deny' && egress[k] !== undefined);
    const ok = (v: unknown) => v === undefined || isStrings(v);
    const { allow, deny } = egress;
    if (!unknown.length && ok(allow) && ok(deny)) {
      const out: W['EgressRules'] = {};
      if (isStrings(allow)) out.allow = [...allow];
      if (isStrings(deny)) out.deny = [...deny];
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
function injectBody(inject: unknown): InjectRule[] {
  const rule = (r: unknown): r is InjectRule =>
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

/** `create`'s `egress`, `inject`, `publicPorts` and `autoResume` → the request's `network`
 * (absent when none is given). */
function networkBody(
  egress: unknown,
  inject: unknown,
  publicPorts: unknown,
  autoResume: unknown,
): { egress?: W['Egress']; inject?: InjectRule[]; public_ports?: boolean; auto_resume?: boolean } | undefined {
  const noEgress = egress === undefined || egress === null;
  const noInject = inject === undefined || inject === null;
  const flags = {
    ...(flagBody(publicPorts, 'publicPorts') ? { public_ports: true } : {}),
    ...(flagBody(autoResume, 'autoResume') ? { auto_resume: true } : {}),
  };
  if (noEgress && noInject) return Object.keys(flags).length ? flags : undefined;
  if (noEgress) {
    throw new InvalidArgumentError('inject needs egress to its hosts: give egress as well (e.g. egress: [host])');
  }
  return { egress: egressBody(egress), ...(noInject ? {} : { inject: injectBody(inject) }), ...flags };
}

/** A boolean option (`publicPorts`, `autoResume`), or absent. */
function flagBody(v: unknown, name: string): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw new InvalidArgumentError(`${name} must be true or false`);
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
  /** The sandbox's id (pass it to {@link CodeSandbox.connect} later). */
  readonly sandboxId: string;
  /** @internal */
  declare readonly _http: HttpClient;
  /** @internal */
  declare private _info: SandboxInfo | undefined;
  /** Shell commands and processes: `run`, `list`, `connect`, `kill`. */
  declare readonly commands: Commands;
  /** Interactive terminals: `create`, `connect`, `sendInput`, `resize`, `kill`. */
  declare readonly pty: Pty;
  /** The sandbox's filesystem: `read`, `write`, `list`, `exists`, `makeDir`, `remove`, `rename`, `getInfo`, `watchDir`. */
  declare readonly files: Files;

  /** Use {@link CodeSandbox.create} or {@link CodeSandbox.connect} instead. */
  private constructor(sandboxId: string, http: HttpClient, info?: W['SandboxInfo']) {
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
  static async create(opts: CreateOptions = {}): Promise<CodeSandbox> {
    if (!isPlainObject(opts)) throw new InvalidArgumentError('CodeSandbox.create takes an options object');
    if (opts.snapshot !== undefined && opts.snapshot !== null) return CodeSandbox._fromSnapshot(opts);
    const body: Record<string, unknown> = {
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
    const info = (await http.json('POST', '/v1/sandboxes', body)) as W['SandboxInfo'];
    return new CodeSandbox(info.sandbox_id, http, info);
  }

  /** @internal `create({ snapshot })`: a clone; only its own lifetime and labels may be given. */
  static async _fromSnapshot(opts: CreateOptions): Promise<CodeSandbox> {
    const id = snapshotId(opts.snapshot);
    for (const k of ['template', 'envs', 'limits', 'volumes', 'egress', 'inject', 'publicPorts', 'autoResume'] as const) {
      if (opts[k] !== undefined) {
        throw new InvalidArgumentError(
          `a sandbox from a snapshot has the snapshot's template, envs, limits, volumes and network: ${k} cannot be given with snapshot`,
        );
      }
    }
    const body: Record<string, unknown> = {
      // An admin key clones into the snapshot's project (a clone stays in its snapshot's project).
      project: opts.project ?? (isPlainObject(opts.snapshot) ? opts.snapshot.project : undefined),
      snapshot_id: id,
      timeout_ms: positiveInt(opts.timeoutMs, 'timeoutMs'),
      on_timeout: onTimeoutBody(opts.onTimeout),
      metadata: stringMap(opts.metadata, 'metadata'),
    };
    dropUndefined(body);
    const http = new HttpClient(resolveConfig(opts));
    const info = (await http.json('POST', '/v1/sandboxes', body)) as W['SandboxInfo'];
    return new CodeSandbox(info.sandbox_id, http, info);
  }

  /**
   * Connect to an existing sandbox by id; a paused sandbox is resumed with its kernels' state intact,
   * a hibernated one relaunched with its contexts restored (see {@link CodeSandbox.restoreReport}).
   */
  static async connect(sandboxId: string, opts: ConnectionOptions = {}): Promise<CodeSandbox> {
    if (typeof sandboxId !== 'string' || !sandboxId) {
      throw new InvalidArgumentError('CodeSandbox.connect takes a sandbox id');
    }
    const http = new HttpClient(resolveConfig(opts));
    let info = (await http.json('GET', `/v1/sandboxes/${enc(sandboxId)}`)) as W['SandboxInfo'];
    if (info.state === 'killed') {
      throw new NotFoundError(`sandbox ${sandboxId} was killed`, { code: 'not_found', status: 404 });
    }
    if (info.state === 'paused' || info.state === 'hibernated') {
      info = (await http.json('POST', `/v1/sandboxes/${enc(sandboxId)}/resume`)) as W['SandboxInfo'];
    }
    return new CodeSandbox(sandboxId, http, info);
  }

  /** The sandboxes this key can see, newest first. */
  static async list(opts: ListOptions = {}): Promise<SandboxInfo[]> {
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
    const list = (await http.json('GET', `/v1/sandboxes${qs ? `?${qs}` : ''}`)) as W['SandboxInfo'][];
    return list.map(toInfo);
  }

  /** Kill a sandbox by id: `true` if it was killed, `false` if it did not exist. */
  static async kill(sandboxId: string, opts: ConnectionOptions = {}): Promise<boolean> {
    const http = new HttpClient(resolveConfig(opts));
    try {
      await http.json('DELETE', `/v1/sandboxes/${enc(sandboxId)}`);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /** @internal */
  get _base(): string {
    return `/v1/sandboxes/${enc(this.sandboxId)}`;
  }

  // ---- lifecycle ----------------------------------------------------------------------------

  /**
   * URL of a service listening on `port` inside the sandbox (HTTP and WebSocket), proxied by the
   * server; requests need the API key as a bearer token.
   */
  getHost(port: number): string {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new InvalidArgumentError(`port must be an integer in 1..65535, got ${port}`);
    }
    return `${this._http.config.apiUrl}${this._base}/ports/${port}`;
  }

  /** After a resume from hibernation (`resume()` or `connect`), and in a sandbox made from a
   * snapshot or by {@link CodeSandbox.fork}: what each context got back and what was lost. */
  get restoreReport(): HibernationReport | undefined {
    return this._info?.restore;
  }

  /** @internal The answer of a lifecycle request, remembered as the sandbox's latest info. */
  private async _update(method: string, path: string, body?: unknown): Promise<SandboxInfo> {
    this._info = toInfo((await this._http.json(method, path, body)) as W['SandboxInfo']);
    return this._info;
  }

  /** The sandbox's state, template, limits and timeout. */
  async getInfo(): Promise<SandboxInfo> {
    return this._update('GET', this._base);
  }

  /** Whether the sandbox is running (false when paused or gone). */
  async isRunning(): Promise<boolean> {
    try {
      return (await this.getInfo()).state === 'running';
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /** Kill the sandbox: `true` if it was killed, `false` if it was already gone. */
  async kill(): Promise<boolean> {
    try {
      await this._http.json('DELETE', this._base);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /** Freeze the sandbox; kernels keep their state. Resume with `resume()` or `CodeSandbox.connect(id)`. */
  async pause(): Promise<SandboxInfo> {
    return this._update('POST', `${this._base}/pause`);
  }

  /**
   * Continue a paused sandbox, or relaunch a hibernated one and restore its contexts (`restore` in
   * the answer lists per context what was restored and what was lost). Idempotent.
   */
  async resume(): Promise<SandboxInfo> {
    return this._update('POST', `${this._base}/resume`);
  }

  /**
   * Save every context's state to disk and stop the sandbox's processes: it holds no memory and
   * survives a server restart. `hibernation` in the answer lists what each context saved and what
   * it could not. Idempotent.
   */
  async hibernate(): Promise<SandboxInfo> {
    return this._update('POST', `${this._base}/hibernate`);
  }

  /**
   * Save a snapshot (the kernels' state and a copy of the disk) that new sandboxes start from
   * with `CodeSandbox.create({ snapshot })`. The sandbox keeps running; a hibernated one is a
   * {@link ConflictError}. The snapshot lives until {@link Snapshots.delete}.
   */
  async createSnapshot(opts: CreateSnapshotOptions = {}): Promise<SnapshotInfo> {
    if (!isPlainObject(opts)) throw new InvalidArgumentError('createSnapshot takes an options object');
    const body: Record<string, unknown> = {};
    const metadata = stringMap(opts.metadata, 'metadata');
    if (metadata) body.metadata = metadata;
    return toSnapshotInfo((await this._http.json('POST', `${this._base}/snapshots`, body)) as W['SnapshotInfo']);
  }

  /** A new running sandbox with this one's kernels' state and files (this one keeps running). */
  async fork(opts: ForkOptions = {}): Promise<CodeSandbox> {
    if (!isPlainObject(opts)) throw new InvalidArgumentError('fork takes an options object');
    const body: Record<string, unknown> = {};
    const timeoutMs = positiveInt(opts.timeoutMs, 'timeoutMs');
    if (timeoutMs !== undefined) body.timeout_ms = timeoutMs;
    const metadata = stringMap(opts.metadata, 'metadata');
    if (metadata) body.metadata = metadata;
    const info = (await this._http.json('POST', `${this._base}/fork`, body)) as W['SandboxInfo'];
    return new CodeSandbox(info.sandbox_id, this._http, info);
  }

  /** Set the sandbox's lifetime to `timeoutMs` from now. */
  async setTimeout(timeoutMs: number): Promise<SandboxInfo> {
    const ms = positiveInt(timeoutMs, 'timeoutMs');
    if (ms === undefined) throw new InvalidArgumentError('setTimeout takes a number of milliseconds');
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
  async setNetwork(opts: SetNetworkOptions): Promise<SandboxInfo> {
    const given = (v: unknown) => v !== undefined && v !== null;
    const o: unknown = opts;
    if (!isPlainObject(o) || !['egress', 'inject', 'publicPorts', 'autoResume'].some((k) => given(o[k]))) {
      throw new InvalidArgumentError('setNetwork takes { egress?, inject?, publicPorts?, autoResume? } (at least one)');
    }
    // The server keeps the part not given.
    const body: Record<string, unknown> = {};
    if (given(o.egress)) body.egress = egressBody(o.egress);
    if (given(o.inject)) body.inject = injectBody(o.inject);
    if (given(o.publicPorts)) body.public_ports = flagBody(o.publicPorts, 'publicPorts');
    if (given(o.autoResume)) body.auto_resume = flagBody(o.autoResume, 'autoResume');
    return this._update('PATCH', `${this._base}/network`, body);
  }

  /** What the sandbox did through the package mirror and its egress, and what was refused. */
  async networkLog(): Promise<NetworkLog> {
    return toNetworkLog((await this._http.json('GET', `${this._base}/network/log`)) as W['NetworkLog']);
  }

  // ---- contexts -------------------------------------------------------------------------------

  /** Create a context: an independent kernel in this sandbox. */
  async createContext(opts: CreateContextOptions = {}): Promise<Context> {
    const body: Record<string, unknown> = {};
    if (opts.language !== undefined) body.language = opts.language;
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.limits !== undefined) body.limits = contextLimitsBody(opts.limits);
    return toContext((await this._http.json('POST', `${this._base}/contexts`, body)) as W['Context']);
  }

  /** Every context of the sandbox, the default ones included. */
  async listContexts(): Promise<Context[]> {
    const list = (await this._http.json('GET', `${this._base}/contexts`)) as W['Context'][];
    return list.map(toContext);
  }

  /** One context. */
  async getContext(ctx: ContextRef): Promise<Context> {
    return toContext((await this._http.json('GET', `${this._base}/contexts/${enc(contextId(ctx))}`)) as W['Context']);
  }

  /** Replace the context's kernel with a fresh one: its variables and state are cleared. */
  async restartContext(ctx: ContextRef): Promise<Context> {
    return toContext(
      (await this._http.json('POST', `${this._base}/contexts/${enc(contextId(ctx))}/restart`)) as W['Context'],
    );
  }

  /**
   * Fork a context: a new context holding a copy of the live kernel's state (copy-on-write), or,
   * when that would lose threads, child processes or servers, a checkpoint of the kernel's
   * processes (see {@link ForkContextOptions.exact}). A source running a cell → `ConflictError`.
   */
  async forkContext(ctx: ContextRef, opts: ForkContextOptions = {}): Promise<ForkedContext> {
    const body: Record<string, unknown> = {};
    if (opts.limits !== undefined) body.limits = contextLimitsBody(opts.limits);
    if (opts.exact !== undefined) body.exact = opts.exact;
    const w = (await this._http.json('POST', `${this._base}/contexts/${enc(contextId(ctx))}/fork`, body)) as W['ContextFork'];
    return toForkedContext(w);
  }

  /** Interrupt the cell running in the context (state kept). */
  async interruptContext(ctx: ContextRef): Promise<void> {
    await this._http.json('POST', `${this._base}/contexts/${enc(contextId(ctx))}/interrupt`);
  }

  /** Delete the context and stop its kernel. */
  async deleteContext(ctx: ContextRef): Promise<void> {
    await this._http.json('DELETE', `${this._base}/contexts/${enc(contextId(ctx))}`);
  }

  /** Cloudflare-style {@link CodeSandbox.createContext}: resolves to `{ id, language, … }`. */
  createCodeContext(opts: CreateContextOptions = {}): Promise<Context> {
    return this.createContext(opts);
  }

  /** Cloudflare-style {@link CodeSandbox.listContexts}. */
  listCodeContexts(): Promise<Context[]> {
    return this.listContexts();
  }

  /** Cloudflare-style {@link CodeSandbox.deleteContext}. */
  deleteCodeContext(ctx: ContextRef): Promise<void> {
    return this.deleteContext(ctx);
  }

  // ---- running code ---------------------------------------------------------------------------

  /**
   * Run a cell, streaming its output to the callbacks as it is produced; resolves to the whole
   * {@link Execution} when the cell ends. A failing cell resolves too, with `execution.error`.
   * Throws `InvalidArgumentError` (before any request) when both `context` and `language` are given.
   */
  async runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    if (typeof code !== 'string') throw new InvalidArgumentError('runCode takes the code as a string');
    if (!isPlainObject(opts)) throw new InvalidArgumentError('runCode options must be an object');
    const hasContext = opts.context !== undefined && opts.context !== null;
    const hasLanguage = opts.language !== undefined && opts.language !== null;
    if (hasContext && hasLanguage) {
      throw new InvalidArgumentError(
        'pass either `context` or `language` to runCode, not both: a context already has a language',
      );
    }
    const body: Record<string, unknown> = { code };
    if (hasContext) body.context = contextId(opts.context);
    if (hasLanguage) {
      if (typeof opts.language !== 'string') throw new InvalidArgumentError('language must be a string');
      body.language = opts.language;
    }
    const env = stringMap(opts.envs, 'envs');
    if (env) body.env = env;
    const timeoutMs = positiveInt(opts.timeoutMs, 'timeoutMs');
    if (timeoutMs !== undefined) body.timeout_ms = timeoutMs;

    // With a caller's signal or a deadline, `ctrl` is our own, joined with them. A callback that
    // throws closes the stream either way (the server then interrupts the cell): `ndjsonFrames`
    // cancels an unfinished body when its reader stops. Without either, no signal at all (an
    // abort listener per cell costs more than the rest of the SDK's own work on it).
    const path = `${this._base}/execute`;
    const { res, ctrl, signal } =
      opts.signal || opts.requestTimeoutMs
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
      await foldAggregate(execution, (await res.json()) as W['Execution'], opts);
      return execution;
    }
    let ended = false;
    const callbacks = new Callbacks();
    try {
      // (the `end` frame is the last: the response's own end is not waited for)
      for await (const frame of ndjsonFrames(res, signal, isEndFrame)) {
        const ev = execution.apply(frame);
        if (!ev) continue;
        // (a callback not given is not awaited: no turn of the event loop per frame for nothing)
        switch (ev.kind) {
          case 'stdout':
            if (opts.onStdout) await callbacks.call(opts.onStdout, ev.text);
            if (opts.onOutput) await callbacks.call(opts.onOutput, ev.text, 'stdout');
            break;
          case 'stderr':
            if (opts.onStderr) await callbacks.call(opts.onStderr, ev.text);
            if (opts.onOutput) await callbacks.call(opts.onOutput, ev.text, 'stderr');
            break;
          case 'result':
            if (opts.onResult) await callbacks.call(opts.onResult, ev.result);
            break;
          case 'error':
            if (opts.onError) await callbacks.call(opts.onError, ev.error);
            break;
          case 'end':
            ended = true;
            break;
        }
      }
    } catch (err) {
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
  async exec(command: string, opts: ExecOptions = {}): Promise<ExecResult> {
    if (typeof command !== 'string') throw new InvalidArgumentError('exec takes the command as a string');
    if (!isPlainObject(opts)) throw new InvalidArgumentError('exec options must be an object');
    const timeoutMs = positiveInt(opts.timeout ?? opts.timeoutMs, 'timeout');
    const started = Date.now();
    const { fold } = await this.commands._start(command, {
      cwd: opts.cwd,
      envs: stringMap(opts.env ?? opts.envs, 'env'),
      timeoutMs,
      signal: opts.signal,
      onStdout: async (t: string) => {
        await callback(opts.onStdout, t);
        await callback(opts.onOutput, 'stdout', t);
      },
      onStderr: async (t: string) => {
        await callback(opts.onStderr, t);
        await callback(opts.onOutput, 'stderr', t);
      },
    });
    // (a foreground start: the fold of the whole stream, never a handle)
    const r = (fold as { result(): CommandResult }).result();
    if (r.timedOut) {
      const t = new TimeoutError(`command timed out after ${timeoutMs} ms: ${command}`);
      t.result = execResult(command, r, 124, started);
      throw t;
    }
    return execResult(command, r, r.exitCode, started);
  }
}

function execResult(command: string, r: CommandResult, exitCode: number, started: number): ExecResult {
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
async function foldAggregate(execution: Execution, agg: W['Execution'], opts: RunCodeOptions): Promise<void> {
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
    await callback(opts.onResult, (ev as { result: Result }).result);
  }
  if (agg.error) {
    const ev = execution.apply({ type: 'error', ...agg.error });
    await callback(opts.onError, (ev as { error: ExecutionError }).error);
  }
  execution.apply({ type: 'end', status: agg.status, duration_ms: agg.duration_ms, usage: agg.usage });
}
