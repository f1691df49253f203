// Type declarations of `@lizard-build/sdk`, written by hand for the plain-JavaScript ESM sources in
// this folder (there is no build step). They describe the public API only; the runtime behaviour
// is in sandbox.js, commands.js, files.js, execution.js, errors.js and http.js.
//
// The server's wire types (the JSON of the HTTP API, snake_case) are in wire.d.ts, generated from
// crates/lizard-server/openapi.json (`npm run gen:wire`). The types here are the SDK's camelCase
// view of them, made from the answers by the typed converters of convert.js; test/wire-check.ts
// checks each one against its wire schema at compile time (a field added, removed, renamed or
// retyped on the wire fails the SDK's tests until this file and the code that builds it follow)
// and lists where and why the SDK deliberately differs. The pure enumerations are aliases of the
// wire's.

import type { components } from './wire.js';

/** The server's wire types (snake_case JSON), generated from its OpenAPI document: `WireSchemas['SandboxInfo']`, … */
export type WireSchemas = components['schemas'];

// ---- configuration -------------------------------------------------------------------------------

/** Where and how to reach the Lizard server. */
export interface ConnectionOptions {
  /** Base URL of `lizard serve`, e.g. `http://127.0.0.1:8787`. Default: `LIZARD_API_URL`, else `http://127.0.0.1:8787`. */
  apiUrl?: string;
  /** API key (`lz_…`). Default: `LIZARD_API_KEY`. */
  apiKey?: string;
  /** Client-side deadline of each control request (not of `runCode`), in ms. Default 60000. */
  requestTimeoutMs?: number;
}

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
}

/** Options of {@link CodeSandbox.setNetwork}: at least one; the one not given is kept. */
export type SetNetworkOptions =
  | { egress: Egress; inject?: InjectRule[] }
  | { egress?: Egress; inject: InjectRule[] };

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

/** A volume to mount at sandbox create. */
export interface VolumeMount {
  /** The volume's name (or id) in the sandbox's project. */
  name: string;
  /** Absolute path strictly below `/home/user` or `/mnt`, or at/below `/data` or `/workspace`.
   * Default `/home/user/<name>`. */
  mountPath?: string;
  /** Mount read-only (writes fail with EROFS). Default false. */
  readOnly?: boolean;
}

/** A volume mounted in a sandbox, as {@link SandboxInfo} reports it. */
export interface SandboxVolume {
  volumeId: string;
  name: string;
  mountPath: string;
  readOnly: boolean;
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

// ---- snapshots -----------------------------------------------------------------------------------

/** How memory state was captured: `criu` — every process of the sandbox checkpointed (memory,
 * threads, sockets, running commands) —, or `per-language` — each kernel saved its own state
 * (variables, functions, imports, cwd); what cannot be saved is listed in `lost`. */
export type SnapshotMethod = 'criu' | 'per-language' | (string & {});

/** Options of {@link CodeSandbox.createSnapshot}. */
export interface CreateSnapshotOptions {
  /** Free-form string labels of the snapshot. */
  metadata?: Record<string, string>;
}

/** Options of {@link CodeSandbox.fork}. */
export interface ForkOptions {
  /** The fork's lifetime in ms (the source's timeout when absent). */
  timeoutMs?: number;
  /** The fork's labels. */
  metadata?: Record<string, string>;
}

/** A snapshot as the server reports it. */
export interface SnapshotInfo {
  /** `snap_…`: what `CodeSandbox.create({ snapshot })` takes. */
  snapshotId: string;
  /** The sandbox it was taken of (it may be gone since). */
  sandboxId: string;
  project: string;
  template: string;
  createdAt: Date;
  /** Host disk the snapshot holds. */
  sizeBytes: number;
  /** How the memory state was captured. */
  method: SnapshotMethod;
  /** Why this method (what the host offers). */
  methodReason: string;
  /** How long the source sandbox was frozen for the snapshot (memory dump and disk copy), in
   * milliseconds; absent for snapshots of older servers. */
  frozenMs?: number;
  /** Per context: what was saved (`restored`) and what could not be (`lost`). */
  contexts: ContextReport[];
  metadata: Record<string, string>;
  /** The source's limits, which every clone gets. */
  limits?: SandboxLimits;
}

/** Options of {@link Snapshots.list}. */
export interface SnapshotListOptions extends ConnectionOptions {
  /** Only the snapshots of this sandbox. */
  sandboxId?: string;
  /** Admin keys: only this project's (every project's when absent). */
  project?: string;
}

/** Saved copies of running sandboxes: taken with {@link CodeSandbox.createSnapshot}, started from
 * with `CodeSandbox.create({ snapshot })`. */
export declare class Snapshots {
  private constructor();
  static list(opts?: SnapshotListOptions): Promise<SnapshotInfo[]>;
  /** {@link NotFoundError} if the key cannot see it. */
  static get(snapshot: string | SnapshotInfo, opts?: ConnectionOptions): Promise<SnapshotInfo>;
  /** `true` if deleted, `false` if it did not exist (or the key cannot see it). Clones keep running. */
  static delete(snapshot: string | SnapshotInfo, opts?: ConnectionOptions): Promise<boolean>;
}

// ---- secrets -------------------------------------------------------------------------------------

/** A secret as the server reports it: its name and times, never its value. */
export interface SecretInfo {
  project: string;
  name: string;
  createdAt: Date;
  /** When its value was last set. */
  updatedAt: Date;
}

/** What {@link Secrets.set} resolves to. */
export interface SecretSetResult extends SecretInfo {
  /** `true` if the secret is new, `false` if its value was replaced. */
  created: boolean;
}

/** A project's secrets, write-only: no call returns a value. Sandboxes use them through
 * {@link CreateOptions.inject} rules, and the values never enter them. An admin key reaches
 * every project's, a project key its own (another project is a {@link NotFoundError}). */
export declare class Secrets {
  private constructor();
  /** Create or replace a secret. `name`: 1-64 letters, digits, `_` or `-`; `value`: 1-8192 bytes
   * of visible ASCII or spaces (else an {@link InvalidArgumentError}, which does not show it); at
   * most 256 per project ({@link ConflictError}). Running sandboxes get a new value at their
   * next `setNetwork` or start. */
  static set(project: string, name: string, value: string, opts?: ConnectionOptions): Promise<SecretSetResult>;
  /** Names and times, never values. */
  static list(project: string, opts?: ConnectionOptions): Promise<SecretInfo[]>;
  /** `true` if deleted, `false` if the project has no such secret. Running sandboxes keep its
   * value until their next start or rule change. */
  static delete(project: string, name: string, opts?: ConnectionOptions): Promise<boolean>;
}

// ---- volumes -------------------------------------------------------------------------------------

/** Options of {@link Volumes.create}. */
export interface VolumeCreateOptions extends ConnectionOptions {
  /** Unique in the project: `[a-z0-9][a-z0-9._-]{0,62}`, not starting with `vol_`. */
  name: string;
  /** Capacity (16 MiB to 1 TiB; default 10 GiB). Writes past it fail with ENOSPC in the sandbox. */
  sizeLimitBytes?: number;
  /** Owning project; a project key's own when absent. */
  project?: string;
}

/** Options of {@link Volumes.list} and {@link Volumes.get}. */
export interface VolumeListOptions extends ConnectionOptions {
  project?: string;
}

/** Options of {@link Volumes.delete}. */
export interface VolumeDeleteOptions extends VolumeListOptions {
  /** Kill the sandboxes that mount the volume first (otherwise a mounted volume is refused). */
  force?: boolean;
}

/** A volume as the server reports it. */
export interface VolumeInfo {
  volumeId: string;
  project: string;
  name: string;
  sizeLimitBytes: number;
  /** Bytes in use in the volume's file system. */
  usedBytes: number;
  createdAt: Date;
  /** Running or paused sandboxes that mount it. */
  mountedBy: string[];
}

/** Persistent named volumes of a project; their data outlives every sandbox. */
export declare class Volumes {
  private constructor();
  static create(opts: VolumeCreateOptions): Promise<VolumeInfo>;
  static list(opts?: VolumeListOptions): Promise<VolumeInfo[]>;
  /** By name (in `project` or the key's own) or id (`vol_…`). */
  static get(nameOrId: string, opts?: VolumeListOptions): Promise<VolumeInfo>;
  /** `true` if deleted, `false` if it did not exist; throws {@link VolumeInUseError} while mounted unless `force`. */
  static delete(nameOrId: string, opts?: VolumeDeleteOptions): Promise<boolean>;
}

// ---- templates -----------------------------------------------------------------------------------

/** A template build's context: a directory path (packed by the SDK as a tar.gz: files, directories
 * and symlinks), a tar or tar.gz archive's path, or the bytes of one (at most 64 MiB). */
export type TemplateContext = string | Uint8Array | ArrayBuffer;

/** A build step starts: `index` from 1 to `total`; `name` is the instruction (`RUN pip install x`)
 * or one of the build's own steps (`start build sandbox`, `import layer`). */
export interface TemplateBuildStep {
  index: number;
  total: number;
  name: string;
}

/** Output of a build step (a chunk, not a line). */
export interface TemplateBuildLog {
  stream: 'stdout' | 'stderr';
  text: string;
}

/** Options of {@link Templates.build}. */
export interface TemplateBuildOptions extends ConnectionOptions {
  /** 1-64 of `[A-Za-z0-9._-]`, not starting with `.`; unique in the project (built-in names are reserved). */
  name: string;
  /** The Dockerfile's text (the subset in templates/README.md), starting `FROM <template>`. Exactly
   * one of `dockerfile` and `fromSandbox`. */
  dockerfile?: string;
  /** What `COPY` and `ADD` take. */
  context?: TemplateContext;
  /** Values of the Dockerfile's `ARG`s. */
  buildArgs?: Record<string, string>;
  /** Owning project (admin keys; a project key's own otherwise). */
  project?: string;
  /** Every project may use it (admin keys only). */
  public?: boolean;
  /** Called as each step starts. May return a promise (awaited before the next event). */
  onStep?: (step: TemplateBuildStep) => unknown;
  /** Called with each chunk of build output as it arrives. May return a promise. */
  onLog?: (log: TemplateBuildLog) => unknown;
  /** Cancel the build when this client goes away (an abort, a timeout, a callback that throws).
   * Default: the build goes on on the server. */
  cancelOnDisconnect?: boolean;
  /** Aborts the call (and closes the stream). */
  signal?: AbortSignal;
  /** Deadline of the whole call in ms (`TimeoutError`). Default: none. */
  timeoutMs?: number;
  /** A template of this sandbox's files instead of a Dockerfile (see {@link Templates.fromSandbox}). */
  fromSandbox?: CodeSandbox | string;
}

/** Options of {@link Templates.fromSandbox}. */
export interface TemplateFromSandboxOptions extends ConnectionOptions {
  name: string;
  /** A running or paused sandbox of the same project, or its id. */
  sandbox: CodeSandbox | string;
  project?: string;
  public?: boolean;
}

/** Options of {@link Templates.list}, {@link Templates.get} and {@link Templates.delete}. */
export interface TemplateListOptions extends ConnectionOptions {
  project?: string;
}

/** `'building'`, `'ready'` or `'failed'`. */
export type TemplateState = WireSchemas['TemplateState'];

/** One build of a template. */
export interface TemplateVersion {
  /** Content key (hash of the base's key, the Dockerfile, the build args and the context). */
  key: string;
  state: TemplateState;
  createdAt: Date;
  sizeBytes: number;
}

/** Package versions by package manager: name (npm: install path) → version. */
export interface TemplatePackages {
  debian: Record<string, string>;
  python: Record<string, string>;
  node: Record<string, string>;
}

/** A template as the server reports it. */
export interface TemplateInfo {
  name: string;
  /** The owning project; absent for built-ins. */
  project?: string;
  /** A built-in template (`code-interpreter-v1`): it cannot be deleted. */
  builtin: boolean;
  /** Every project may use it. */
  public: boolean;
  state: TemplateState;
  /** The template it is a layer over (absent for built-ins). */
  base?: string;
  /** The ready build's key. */
  key?: string;
  /** Bytes of its own layer (a built-in: of its whole root file system). */
  sizeBytes: number;
  createdAt: Date;
  updatedAt: Date;
  /** Why the last build failed. */
  error?: { code: string; message: string };
  /** Its builds, oldest first. */
  versions: TemplateVersion[];
  /** The end of the last build's log (empty in lists). */
  buildLog: string;
  /**
   * The exact versions its ready build installed (`get` only; absent in lists and for builds
   * that did not record them). A user template's were listed inside its build sandbox.
   */
  packages?: TemplatePackages;
}

/** User templates: built from a Dockerfile or a sandbox, then used with
 * `CodeSandbox.create({ template: name })`. */
export declare class Templates {
  private constructor();
  /** Build and resolve with the ready template (a cache hit resolves at once); throws
   * {@link TemplateBuildError} when the Dockerfile is invalid or a step fails. */
  static build(opts: TemplateBuildOptions): Promise<TemplateInfo>;
  static fromSandbox(opts: TemplateFromSandboxOptions): Promise<TemplateInfo>;
  /** The key's project's templates, the public ones and the built-ins. */
  static list(opts?: TemplateListOptions): Promise<TemplateInfo[]>;
  /** {@link NotFoundError} if the key cannot see it. */
  static get(name: string, opts?: TemplateListOptions): Promise<TemplateInfo>;
  /** {@link NotFoundError} if there is none; {@link TemplateInUseError} while another template is built on it. */
  static delete(name: string, opts?: TemplateListOptions): Promise<void>;
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
}

/** A context made by {@link CodeSandbox.forkContext}. */
export interface ForkedContext extends Context {
  /** Id of the context it was forked from. */
  forkedFrom: string;
  /** What the fork could not carry (threads other than the kernel's, background jobs, …), with why. */
  lost: { name: string; reason: string }[];
}

// ---- results -------------------------------------------------------------------------------------

/** Named formats a result can have. */
export type ResultFormat =
  | 'text'
  | 'html'
  | 'markdown'
  | 'svg'
  | 'png'
  | 'jpeg'
  | 'pdf'
  | 'latex'
  | 'json'
  | 'javascript';

/**
 * One rich value produced by a cell: the value of its last expression (`isMainResult`) or a
 * `display()` output (a matplotlib figure, an HTML table, …).
 */
export declare class Result {
  private constructor();
  /** True for the value of the cell's last expression, false for `display()` output. */
  readonly isMainResult: boolean;
  /**
   * The primary textual value: `text/plain` when present (`runCode('1 + 1')` → `'2'`), else the
   * first of Markdown, HTML, LaTeX, SVG, JavaScript present, else the JSON serialized, else
   * `undefined` (an image alone: read `png`/`jpeg`).
   */
  readonly data?: string;
  /** `text/plain`. */
  readonly text?: string;
  /** `text/html` (e.g. a pandas DataFrame). */
  readonly html?: string;
  /** `text/markdown`. */
  readonly markdown?: string;
  /** `image/svg+xml`. */
  readonly svg?: string;
  /** `image/png`, base64-encoded (e.g. a matplotlib figure). */
  readonly png?: string;
  /** `image/jpeg`, base64-encoded. */
  readonly jpeg?: string;
  /** `application/pdf`, base64-encoded. */
  readonly pdf?: string;
  /** `text/latex`. */
  readonly latex?: string;
  /** `application/json`: any JSON value. */
  readonly json?: unknown;
  /** `application/javascript`. */
  readonly javascript?: string;
  /** A pandas DataFrame's data, `{column: [values…]}` (not listed in `formats`). */
  readonly table?: Record<string, unknown[]>;
  /** The chart a matplotlib figure draws: `type` (`line`, `scatter`, `bar`, `pie`,
   * `box_and_whisker`, `superchart`), `title`, axis labels/ticks and `elements` (not listed in
   * `formats`). */
  readonly chart?: Record<string, unknown>;
  /** Named formats present, in the order above (`['text', 'png']`), then other MIME types as they are. */
  readonly formats: Array<ResultFormat | (string & {})>;
  /** MIME types without a named accessor. */
  readonly extra: Record<string, unknown>;
  /** The whole MIME bundle as the server sent it. */
  readonly raw: Record<string, unknown>;
  /** Kernel-provided metadata, when any. */
  readonly metadata?: unknown;
}

/**
 * A failed cell (data, not a thrown exception): a Python exception, a JavaScript throw, a Bash
 * cell that exited non-zero (`name === 'ExitCode'`, `value` is the status), `KeyboardInterrupt`,
 * `Timeout` (the run's `timeoutMs` passed) or `KernelDied` (the context got a fresh kernel).
 */
export declare class ExecutionError {
  private constructor();
  /** Exception class name, e.g. `NameError`, `ReferenceError`, `ExitCode`, `KernelDied`. */
  readonly name: string;
  /** The exception's message. */
  readonly value: string;
  /** Same as `value`. */
  readonly message: string;
  /** The traceback as plain text (no colour codes); may be empty. */
  readonly traceback: string;
  toString(): string;
}

/** One value per format: from the main result when it has it, else the last result that has it. */
export interface ExecutionOutputs {
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  /** base64 */
  png?: string;
  /** base64 */
  jpeg?: string;
  /** base64 */
  pdf?: string;
  latex?: string;
  json?: any;
  javascript?: string;
}

/** How a run ended: `'ok'`, `'error'`, `'interrupted'`, `'timeout'` or `'kernel_died'`. */
export type ExecutionStatus = WireSchemas['ExecutionStatus'];

/** The whole run of one cell. */
export declare class Execution {
  private constructor();
  /** Everything the cell wrote to stdout (`print(x * 2)` → `'84\n'`). */
  readonly stdout: string;
  /** Everything the cell wrote to stderr. */
  readonly stderr: string;
  /** Output chunks as they arrived (chunks are not lines). */
  readonly logs: { stdout: string[]; stderr: string[] };
  /** Rich results in the order the cell produced them. */
  readonly results: Result[];
  /** The cell's error, if it failed. */
  readonly error?: ExecutionError;
  /** The kernel's counter for this cell (1 for the first cell of a kernel). */
  readonly executionCount: number;
  /** The context the cell ran in. */
  readonly contextId?: string;
  /** How the run ended. */
  readonly status?: ExecutionStatus;
  /** Wall time of the run on the server, in ms. */
  readonly durationMs: number;
  /** CPU time and peak memory of the kernel during the run, when measured. */
  readonly usage?: { cpuMs: number; peakRssBytes: number };
  /** The main result's `text/plain`, if the last expression had a value. */
  readonly text?: string;
  /** Cloudflare-style: all text output, stdout and stderr interleaved in arrival order. */
  readonly output: string;
  /** Cloudflare-style: true when the cell did not fail (`error` is undefined). */
  readonly success: boolean;
  /** Cloudflare-style: the union of the results' formats, e.g. `['text', 'png']`. */
  readonly formats: Array<ResultFormat | (string & {})>;
  /** Cloudflare-style: one value per format (see {@link ExecutionOutputs}). */
  readonly outputs: ExecutionOutputs;
  toJSON(): Record<string, unknown>;
}

// ---- runCode -------------------------------------------------------------------------------------

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

// ---- commands ------------------------------------------------------------------------------------

/** Options of {@link Commands.run}. */
export interface CommandStartOptions {
  /** Working directory; relative paths start at `/home/user` (the default). */
  cwd?: string;
  /** Environment variables, merged over the sandbox's. */
  envs?: Record<string, string>;
  /** The server stops the process group after this many ms (SIGTERM, then SIGKILL). */
  timeoutMs?: number;
  /** Each stdout chunk as it arrives (chunks are not lines). */
  onStdout?: (text: string) => unknown;
  /** Each stderr chunk as it arrives. */
  onStderr?: (text: string) => unknown;
  /**
   * `true`: keep a stdin pipe open for `sendStdin` (background commands). A string or bytes: written
   * to the command's stdin as soon as it starts, then stdin is closed.
   */
  stdin?: boolean | string | Uint8Array;
  /** The user to run as; only `user` exists. */
  user?: string;
  /** A free-form label shown by `commands.list()`. */
  tag?: string;
  /** Abort: the client stops reading the output. */
  signal?: AbortSignal;
  /** Client-side deadline of a foreground command's whole streamed request, in ms. Default: none. */
  requestTimeoutMs?: number;
}

/** A finished command. */
export interface CommandResult {
  pid: number;
  /** The exit status; 128 + the signal's number when a signal killed it. */
  exitCode: number;
  /** All output, as (lossy UTF-8) text. */
  stdout: string;
  stderr: string;
  /** The signal that killed it (e.g. `SIGKILL`), when one did. */
  signal?: string;
  /** `timeoutMs` passed and the server stopped it. */
  timedOut: boolean;
  /** Server-side time from start to exit. */
  durationMs: number;
}

/** A running (or finished) command: from `commands.run(…, { background: true })` or `commands.connect(pid)`. */
export interface CommandHandle {
  readonly pid: number;
  /** Output received so far. */
  readonly stdout: string;
  readonly stderr: string;
  /** The exit status once it ended, `undefined` while it runs. */
  readonly exitCode: number | undefined;
  /** Wait for the end: the result, or a `CommandExitError` on a non-zero exit or a signal. */
  wait(): Promise<CommandResult>;
  /** SIGKILL the command's process group: `true` if it was running. */
  kill(): Promise<boolean>;
  /** Write to stdin (the command must have been started with `stdin: true`). */
  sendStdin(data: string | Uint8Array): Promise<void>;
  /** Close stdin (end of input). */
  closeStdin(): Promise<void>;
}

/** How a process ended. */
export interface ProcessEnd {
  exitCode?: number;
  signal?: string;
  timedOut: boolean;
  durationMs: number;
}

/** A process as `commands.list()` reports it. */
export interface ProcessInfo {
  pid: number;
  /** The shell command line, when started with one. */
  cmd?: string;
  /** What was executed, e.g. `['/usr/bin/bash', '-c', 'echo hi']`. */
  argv: string[];
  cwd: string;
  /** The request's environment variables (not the inherited ones). */
  envs: Record<string, string>;
  tag?: string;
  /** The terminal size, for a PTY process. */
  pty?: { cols: number; rows: number };
  /** Whether it has a stdin pipe. */
  stdin: boolean;
  /** Milliseconds since the Unix epoch. */
  startedAtMs: number;
  /** How it ended; absent while it runs (finished processes stay listed for 60 s). */
  end?: ProcessEnd;
}

/** `sandbox.commands`: shell commands and other processes of the sandbox. */
export interface Commands {
  /**
   * Run `bash -c cmd` and wait for it: resolves to `{ exitCode, stdout, stderr, … }`; a non-zero exit
   * throws a {@link CommandExitError} (with `.result`), a `timeoutMs` stop a `TimeoutError` (with `.result`).
   */
  run(cmd: string, opts?: CommandStartOptions & { background?: false }): Promise<CommandResult>;
  /** Start `bash -c cmd` in the background: resolves to a handle as soon as the process exists. */
  run(cmd: string, opts: CommandStartOptions & { background: true }): Promise<CommandHandle>;
  /** Running processes, and those that ended in the last 60 s. */
  list(): Promise<ProcessInfo[]>;
  /** Reattach to a process's output (what is still buffered is replayed first). */
  connect(
    pid: number,
    opts?: { onStdout?: (text: string) => unknown; onStderr?: (text: string) => unknown; signal?: AbortSignal },
  ): Promise<CommandHandle>;
  /** SIGKILL a process's group: `true` if it was killed, `false` if there is no such process. */
  kill(pid: number): Promise<boolean>;
  /** Write to a process's stdin. */
  sendStdin(pid: number, data: string | Uint8Array): Promise<void>;
  /** Close a process's stdin. */
  closeStdin(pid: number): Promise<void>;
}

// ---- pty -----------------------------------------------------------------------------------------

/** A terminal size in character cells (1 to 4096 each). */
export interface PtySize {
  cols: number;
  rows: number;
}

/** Options of {@link Pty.create}. */
export interface PtyCreateOptions extends PtySize {
  /** Each chunk of terminal output, as raw bytes, as it arrives (render it with a terminal emulator). */
  onData?: (data: Uint8Array) => unknown;
  /** A shell command line to run on the terminal; default: an interactive `bash -i`. */
  cmd?: string;
  /** Working directory; relative paths start at `/home/user` (the default). */
  cwd?: string;
  /** Environment variables, merged over the sandbox's; `TERM` defaults to `xterm-256color`. */
  envs?: Record<string, string>;
  /** The server stops the terminal's process group after this many ms. */
  timeoutMs?: number;
  /** The user to run as; only `user` exists. */
  user?: string;
  /** A free-form label shown by `commands.list()`. */
  tag?: string;
  /** Abort: the client stops reading the output (the terminal keeps running). */
  signal?: AbortSignal;
}

/** How a terminal's program ended. */
export interface PtyResult {
  pid: number;
  /** The exit status; 128 + the signal's number when a signal killed it. */
  exitCode: number;
  /** The signal that killed it (e.g. `SIGKILL`), when one did. */
  signal?: string;
  timedOut: boolean;
  /** Server-side time from start to exit. */
  durationMs: number;
}

/** A running (or finished) terminal: from `pty.create(…)` or `pty.connect(pid)`. */
export interface PtyHandle {
  readonly pid: number;
  /** The exit status once it ended, `undefined` while it runs. */
  readonly exitCode: number | undefined;
  /** Type into the terminal: text (sent as UTF-8) or bytes; `\r` is Enter. */
  sendInput(data: string | Uint8Array): Promise<void>;
  /** Change the terminal size (the program gets SIGWINCH). */
  resize(size: PtySize): Promise<void>;
  /** SIGKILL the terminal's process group: `true` if it was running. */
  kill(): Promise<boolean>;
  /** Wait for the program to end. A non-zero exit or a signal resolves too (it does not throw). */
  wait(): Promise<PtyResult>;
}

/** `sandbox.pty`: interactive terminals. */
export interface Pty {
  /** Start a program (default `bash -i`) on a new pseudo-terminal: resolves once it exists. */
  create(opts: PtyCreateOptions): Promise<PtyHandle>;
  /** Reattach to a terminal's output (what is still buffered is replayed first). */
  connect(pid: number, opts?: { onData?: (data: Uint8Array) => unknown; signal?: AbortSignal }): Promise<PtyHandle>;
  /** Type into a terminal. */
  sendInput(pid: number, data: string | Uint8Array): Promise<void>;
  /** Change a terminal's size. */
  resize(pid: number, size: PtySize): Promise<void>;
  /** SIGKILL a terminal's process group: `true` if it was killed, `false` if there is no such process. */
  kill(pid: number): Promise<boolean>;
}

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

/** `sandbox.files`: the sandbox's filesystem. Relative paths start at `/home/user`. */
export interface Files {
  read(path: string, opts?: FileRequestOptions & { format?: 'text' }): Promise<string>;
  read(path: string, opts: FileRequestOptions & { format: 'bytes' }): Promise<Uint8Array>;
  read(path: string, opts: FileRequestOptions & { format: 'stream' }): Promise<ReadableStream<Uint8Array>>;
  /** Write a file (parents are created, an existing file is replaced). */
  write(path: string, data: FileData, opts?: FileRequestOptions): Promise<EntryInfo>;
  /** Write several files, one after the other. */
  write(files: { path: string; data: FileData }[], opts?: FileRequestOptions): Promise<EntryInfo[]>;
  /** Entries below a directory, `depth` levels deep (default 1), sorted by path. */
  list(path: string, opts?: { depth?: number }): Promise<EntryInfo[]>;
  exists(path: string): Promise<boolean>;
  getInfo(path: string): Promise<EntryInfo>;
  /** Create a directory and its parents: `false` if it already existed. */
  makeDir(path: string): Promise<boolean>;
  /** Remove a file, symlink, or directory with its contents. */
  remove(path: string): Promise<void>;
  /** Move `from` to `to`; resolves to the moved entry. */
  rename(from: string, to: string): Promise<EntryInfo>;
  /** Watch a directory; resolves once the watch is in place. */
  watchDir(
    path: string,
    onEvent: (event: FilesystemEvent) => unknown,
    opts?: { recursive?: boolean; signal?: AbortSignal; onExit?: (err?: unknown) => unknown },
  ): Promise<WatchHandle>;
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
export declare class CodeSandbox {
  private constructor();

  /** The sandbox's id (pass it to {@link CodeSandbox.connect} later). */
  readonly sandboxId: string;

  /** Create a sandbox from a template (`code-interpreter-v1` by default). */
  static create(opts?: CreateOptions): Promise<CodeSandbox>;
  /**
   * Connect to an existing sandbox by id; a paused sandbox is resumed with its kernels' state intact,
   * a hibernated one relaunched with its contexts restored (see {@link CodeSandbox.restoreReport}).
   */
  static connect(sandboxId: string, opts?: ConnectionOptions): Promise<CodeSandbox>;
  /** The sandboxes this key can see, newest first. */
  static list(opts?: ListOptions): Promise<SandboxInfo[]>;
  /** Kill a sandbox by id: `true` if it was killed, `false` if it did not exist. */
  static kill(sandboxId: string, opts?: ConnectionOptions): Promise<boolean>;

  /**
   * Run a cell, streaming its output to the callbacks as it is produced; resolves to the whole
   * {@link Execution} when the cell ends. A failing cell resolves too, with `execution.error`.
   * Throws `InvalidArgumentError` (before any request) when both `context` and `language` are given.
   */
  runCode(code: string, opts?: RunCodeOptions): Promise<Execution>;

  /** Create a context: an independent kernel in this sandbox. */
  createContext(opts?: CreateContextOptions): Promise<Context>;
  /** Every context of the sandbox, the default ones included. */
  listContexts(): Promise<Context[]>;
  /** One context. */
  getContext(ctx: ContextRef): Promise<Context>;
  /** Replace the context's kernel with a fresh one: its variables and state are cleared. */
  restartContext(ctx: ContextRef): Promise<Context>;
  /**
   * Fork a context: a new context holding a copy of the live kernel's state (copy-on-write). A
   * source running a cell → `ConflictError`.
   */
  forkContext(ctx: ContextRef, opts?: ForkContextOptions): Promise<ForkedContext>;
  /** Interrupt the cell running in the context (state kept). */
  interruptContext(ctx: ContextRef): Promise<void>;
  /** Delete the context and stop its kernel. */
  deleteContext(ctx: ContextRef): Promise<void>;

  /** Cloudflare-style {@link CodeSandbox.createContext}: resolves to `{ id, language, … }`. */
  createCodeContext(opts?: CreateContextOptions): Promise<Context>;
  /** Cloudflare-style {@link CodeSandbox.listContexts}. */
  listCodeContexts(): Promise<Context[]>;
  /** Cloudflare-style {@link CodeSandbox.deleteContext}. */
  deleteCodeContext(ctx: ContextRef): Promise<void>;

  /** Shell commands and processes: `run`, `list`, `connect`, `kill`. */
  readonly commands: Commands;
  /** Interactive terminals: `create`, `connect`, `sendInput`, `resize`, `kill`. */
  readonly pty: Pty;
  /** The sandbox's filesystem: `read`, `write`, `list`, `exists`, `makeDir`, `remove`, `rename`, `getInfo`, `watchDir`. */
  readonly files: Files;

  /**
   * Run one shell command (`bash -c`, a new process each time) and wait for it. A non-zero exit is
   * `exitCode` (it does not throw); past `timeout` it throws a `TimeoutError` with `.result`.
   */
  exec(command: string, opts?: ExecOptions): Promise<ExecResult>;

  /** The sandbox's state, template, limits and timeout. */
  /**
   * URL of a service listening on `port` inside the sandbox (HTTP and WebSocket), proxied by the
   * server; requests need the API key as a bearer token.
   */
  getHost(port: number): string;
  getInfo(): Promise<SandboxInfo>;
  /** Whether the sandbox is running (false when paused or gone). */
  isRunning(): Promise<boolean>;
  /** Freeze the sandbox; kernels keep their state. Resume with `resume()` or `CodeSandbox.connect(id)`. */
  pause(): Promise<SandboxInfo>;
  /**
   * Continue a paused sandbox, or relaunch a hibernated one and restore its contexts (`restore` in
   * the answer lists per context what was restored and what was lost). Idempotent.
   */
  resume(): Promise<SandboxInfo>;
  /**
   * Save every context's state to disk and stop the sandbox's processes: it holds no memory and
   * survives a server restart. `hibernation` in the answer lists what each context saved and what
   * it could not. Idempotent.
   */
  hibernate(): Promise<SandboxInfo>;
  /** After a resume from hibernation (`resume()` or `connect`), and in a sandbox made from a
   * snapshot or by {@link CodeSandbox.fork}: what each context got back and what was lost. */
  readonly restoreReport: HibernationReport | undefined;
  /**
   * Save a snapshot (the kernels' state and a copy of the disk) that new sandboxes start from
   * with `CodeSandbox.create({ snapshot })`. The sandbox keeps running; a hibernated one is a
   * {@link ConflictError}. The snapshot lives until {@link Snapshots.delete}.
   */
  createSnapshot(opts?: CreateSnapshotOptions): Promise<SnapshotInfo>;
  /** A new running sandbox with this one's kernels' state and files (this one keeps running). */
  fork(opts?: ForkOptions): Promise<CodeSandbox>;
  /** Set the sandbox's lifetime to `timeoutMs` from now. */
  setTimeout(timeoutMs: number): Promise<SandboxInfo>;
  /** Replace the sandbox's egress rules and/or header injection rules, live (`PATCH
   * /v1/sandboxes/{id}/network`): its next connection and DNS query follow them, and its next
   * request to an `inject` host gets the secrets' current values. The one of `egress` and
   * `inject` not given is kept; `inject: []` removes every rule. A sandbox created without
   * egress is a {@link ConflictError}; rules that open anything need an admin key or a project
   * with `allow_egress` ({@link AuthenticationError}, code `permission_denied`); a bad entry, an
   * inject host the egress does not allow or an unknown secret is an
   * {@link InvalidArgumentError} naming it. */
  setNetwork(opts: SetNetworkOptions): Promise<SandboxInfo>;
  /** What the sandbox did through the package mirror and its egress, and what was refused. */
  networkLog(): Promise<NetworkLog>;
  /** Kill the sandbox: `true` if it was killed, `false` if it was already gone. */
  kill(): Promise<boolean>;
}

/** The template `create` uses when none is given: `'code-interpreter-v1'`. */
export declare const DEFAULT_TEMPLATE: string;
/** Where `lizard serve` listens by default: `'http://127.0.0.1:8787'`. */
export declare const DEFAULT_API_URL: string;

// ---- errors --------------------------------------------------------------------------------------

/** Options of the error constructors. */
export interface LizardErrorOptions {
  code?: string;
  status?: number;
  cause?: unknown;
}

/**
 * Base class of every error the SDK throws. `code` is the server's error code (`not_found`,
 * `unauthenticated`, `invalid_request`, `conflict`, …) or an SDK one (`invalid_argument`,
 * `timeout`, `connection`, `stream_ended`); `status` is the HTTP status when there was a response.
 */
export declare class LizardError extends Error {
  constructor(message: string, opts?: LizardErrorOptions);
  readonly code: string;
  readonly status?: number;
}
/** Invalid argument or malformed request (400, 413, 415), also thrown before any request for bad options. */
export declare class InvalidArgumentError extends LizardError {}
/** Missing or unknown API key (401). */
export declare class AuthenticationError extends LizardError {}
/** No such sandbox, context, template, volume or project visible to this key (404). */
export declare class NotFoundError extends LizardError {}
/** The request conflicts with the object's state, e.g. running code in a paused sandbox (409). */
export declare class ConflictError extends LizardError {}
/** The volume is mounted by a running or paused sandbox (`volume_in_use`, 409); delete with `force: true`. */
export declare class VolumeInUseError extends ConflictError {}
/** Another template is built on this one (`template_in_use`, 409). */
export declare class TemplateInUseError extends ConflictError {}
/** A template build failed: `code` is `invalid_dockerfile` (the message names the line) or
 * `build_failed` (a step failed, naming its line); `log` is the output received (its last 1 MiB). */
export declare class TemplateBuildError extends LizardError {
  constructor(message: string, opts?: LizardErrorOptions & { log?: string });
  readonly log: string;
}
/** Too many requests (429). */
export declare class RateLimitError extends LizardError {}
/** A client-side deadline passed (`requestTimeoutMs`, `exec`'s `timeout`). */
export declare class TimeoutError extends LizardError {
  /** For an `exec` or `commands.run` timeout: what the command had printed. */
  result?: ExecResult | CommandResult;
}
/** A `commands.run` command (or a handle's `wait()`) exited non-zero or was killed by a signal. */
export declare class CommandExitError extends LizardError {
  constructor(result: CommandResult, command?: string);
  readonly result: CommandResult;
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly signal?: string;
}
/** The sandbox or server failed (503, 500), or an execution stream ended early. */
export declare class SandboxError extends LizardError {}
/** The server could not be reached. */
export declare class ConnectionError extends LizardError {}
