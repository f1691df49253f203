import { Commands } from './commands.js';
import { Execution } from './execution.js';
import type { ExecutionError, Result } from './execution.js';
import { Files } from './files.js';
import { Pty } from './pty.js';
import type { ConnectionOptions } from './http.js';
import type { SandboxVolume, VolumeMount } from './volumes.js';
import type { CreateSnapshotOptions, ForkOptions, SnapshotInfo, SnapshotMethod } from './snapshots.js';
import type { components } from './wire.js';
type W = components['schemas'];
type WireSchemas = W;
/** The template `create` uses when none is given: `'code-interpreter-v1'`. */
export declare const DEFAULT_TEMPLATE: string;
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
export type SetNetworkOptions = {
    egress: Egress;
    inject?: InjectRule[];
    publicPorts?: boolean;
    autoResume?: boolean;
} | {
    egress?: Egress;
    inject: InjectRule[];
    publicPorts?: boolean;
    autoResume?: boolean;
} | {
    egress?: Egress;
    inject?: InjectRule[];
    publicPorts: boolean;
    autoResume?: boolean;
} | {
    egress?: Egress;
    inject?: InjectRule[];
    publicPorts?: boolean;
    autoResume: boolean;
};
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
    lost: {
        name: string;
        reason: string;
    }[];
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
export type ContextRef = Context | {
    id: string;
} | string;
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
    lost: {
        name: string;
        reason: string;
    }[];
    /** `'live'` (fork(2) of the kernel) or `'checkpoint'` (its processes checkpointed and restored). */
    method: 'live' | 'checkpoint';
    /** Why a live fork that loses something was made instead of a checkpoint. */
    checkpointError?: string;
}
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
    /** The sandbox's id (pass it to {@link CodeSandbox.connect} later). */
    readonly sandboxId: string;
    /** Shell commands and processes: `run`, `list`, `connect`, `kill`. */
    readonly commands: Commands;
    /** Interactive terminals: `create`, `connect`, `sendInput`, `resize`, `kill`. */
    readonly pty: Pty;
    /** The sandbox's filesystem: `read`, `write`, `list`, `exists`, `makeDir`, `remove`, `rename`, `getInfo`, `watchDir`. */
    readonly files: Files;
    /** Use {@link CodeSandbox.create} or {@link CodeSandbox.connect} instead. */
    private constructor();
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
     * URL of a service listening on `port` inside the sandbox (HTTP and WebSocket), proxied by the
     * server; requests need the API key as a bearer token.
     */
    getHost(port: number): string;
    /** After a resume from hibernation (`resume()` or `connect`), and in a sandbox made from a
     * snapshot or by {@link CodeSandbox.fork}: what each context got back and what was lost. */
    get restoreReport(): HibernationReport | undefined;
    /** The sandbox's state, template, limits and timeout. */
    getInfo(): Promise<SandboxInfo>;
    /** Whether the sandbox is running (false when paused or gone). */
    isRunning(): Promise<boolean>;
    /** Kill the sandbox: `true` if it was killed, `false` if it was already gone. */
    kill(): Promise<boolean>;
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
    /** Create a context: an independent kernel in this sandbox. */
    createContext(opts?: CreateContextOptions): Promise<Context>;
    /** Every context of the sandbox, the default ones included. */
    listContexts(): Promise<Context[]>;
    /** One context. */
    getContext(ctx: ContextRef): Promise<Context>;
    /** Replace the context's kernel with a fresh one: its variables and state are cleared. */
    restartContext(ctx: ContextRef): Promise<Context>;
    /**
     * Fork a context: a new context holding a copy of the live kernel's state (copy-on-write), or,
     * when that would lose threads, child processes or servers, a checkpoint of the kernel's
     * processes (see {@link ForkContextOptions.exact}). A source running a cell → `ConflictError`.
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
    /**
     * Run a cell, streaming its output to the callbacks as it is produced; resolves to the whole
     * {@link Execution} when the cell ends. A failing cell resolves too, with `execution.error`.
     * Throws `InvalidArgumentError` (before any request) when both `context` and `language` are given.
     */
    runCode(code: string, opts?: RunCodeOptions): Promise<Execution>;
    /**
     * Run one shell command (`bash -c`, a new process each time) and wait for it. A non-zero exit is
     * `exitCode` (it does not throw); past `timeout` it throws a `TimeoutError` with `.result`.
     */
    exec(command: string, opts?: ExecOptions): Promise<ExecResult>;
}
export {};
