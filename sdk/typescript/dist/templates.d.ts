import type { ConnectionOptions } from './http.js';
import type { CodeSandbox } from './sandbox.js';
import type { components } from './wire.js';
type W = components['schemas'];
type WireSchemas = W;
/** At most this many bytes of build context (the server's limit, after base64 decoding). */
export declare const MAX_CONTEXT_BYTES: number;
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
    error?: {
        code: string;
        message: string;
    };
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
    /**
     * A template of a running or paused sandbox's files (of the same project): its writable layer,
     * copied with its processes frozen (nothing of its memory), becomes a layer over its template.
     */
    static fromSandbox(opts: TemplateFromSandboxOptions): Promise<TemplateInfo>;
    /** The key's project's templates, the public ones and the built-ins. */
    static list(opts?: TemplateListOptions): Promise<TemplateInfo[]>;
    /** {@link NotFoundError} if the key cannot see it. */
    static get(name: string, opts?: TemplateListOptions): Promise<TemplateInfo>;
    /** {@link NotFoundError} if there is none; {@link TemplateInUseError} while another template is built on it. */
    static delete(name: string, opts?: TemplateListOptions): Promise<void>;
}
export {};
