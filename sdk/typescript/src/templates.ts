// `Templates`: user templates (`/v1/templates`) — build one from a Dockerfile (streamed: each step
// and log chunk reaches `onStep` / `onLog` as it arrives) or from a sandbox, list, get, delete.
// A template is a read-only layer over its base; sandboxes start from it with
// `CodeSandbox.create({ template: name })`. Wire types are the server's (see
// crates/lizard-proto/src/template.rs), converted to camelCase at this boundary (convert.ts). A directory
// context is packed here (tar.ts). Not here: the build itself (the server runs it in a build
// sandbox; the Dockerfile subset is in templates/README.md).

import { readFile, stat } from 'node:fs/promises';
import { HttpClient, ndjsonFrames, prop, query, resolveConfig } from './http.js';
import type { ConnectionOptions } from './http.js';
import { Callbacks, streamError } from './commands.js';
import { toTemplateInfo } from './convert.js';
import { InvalidArgumentError, SandboxError, TemplateBuildError } from './errors.js';
import type { CodeSandbox } from './sandbox.js';
import { tarGzDirectory } from './tar.js';
import type { components } from './wire.js';

type W = components['schemas'];
type WireSchemas = W;

const enc = encodeURIComponent;

/** At most this many bytes of build context (the server's limit, after base64 decoding). */
export const MAX_CONTEXT_BYTES = 64 * 1024 * 1024;
/** `TemplateBuildError.log` keeps the last this many characters of a build's log. */
const MAX_LOG_CHARS = 1024 * 1024;

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

function isPlainObject<T>(v: T): v is T & Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function key(name: unknown): string {
  if (typeof name !== 'string' || !name) throw new InvalidArgumentError('a template name is required');
  return enc(name);
}

function tooLarge(): InvalidArgumentError {
  return new InvalidArgumentError('the build context is larger than 64 MiB (compressed)', { code: 'payload_too_large' });
}

/**
 * The build context as tar bytes: a directory is packed (tar.gz), a file is read as an archive
 * already, bytes are taken as they are.
 */
async function contextBytes(context: unknown): Promise<string> {
  let bytes: Uint8Array;
  if (typeof context === 'string') {
    const st = await stat(context).catch(() => undefined);
    if (st?.isDirectory()) {
      try {
        bytes = await tarGzDirectory(context, { maxRawBytes: 8 * MAX_CONTEXT_BYTES });
      } catch (err) {
        if (err instanceof RangeError) throw new InvalidArgumentError(err.message, { cause: err });
        throw err;
      }
    } else if (st?.isFile()) {
      if (st.size > MAX_CONTEXT_BYTES) throw tooLarge();
      bytes = await readFile(context);
    } else {
      throw new InvalidArgumentError(`context ${JSON.stringify(context)} is neither a directory nor a tar archive`);
    }
  } else if (context instanceof Uint8Array) {
    bytes = context;
  } else if (context instanceof ArrayBuffer) {
    bytes = new Uint8Array(context);
  } else {
    throw new InvalidArgumentError('context must be a directory path, a tar archive path or the bytes of a tar');
  }
  if (bytes.length > MAX_CONTEXT_BYTES) throw tooLarge();
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

function sandboxId(sb: unknown): string {
  const id: unknown = typeof sb === 'string' ? sb : prop(sb, 'sandboxId');
  if (typeof id !== 'string' || !id) throw new InvalidArgumentError('fromSandbox must be a CodeSandbox or a sandbox id');
  return id;
}

/** User templates: built from a Dockerfile or a sandbox, then used with
 * `CodeSandbox.create({ template: name })`. */
export class Templates {
  private constructor() {}

  /** Build and resolve with the ready template (a cache hit resolves at once); throws
   * {@link TemplateBuildError} when the Dockerfile is invalid or a step fails. */
  static async build(opts: TemplateBuildOptions): Promise<TemplateInfo> {
    if (!isPlainObject(opts) || typeof opts.name !== 'string' || !opts.name) {
      throw new InvalidArgumentError('Templates.build takes { name, dockerfile, context?, … } or { name, fromSandbox }');
    }
    const hasDockerfile = opts.dockerfile !== undefined && opts.dockerfile !== null;
    const hasSandbox = opts.fromSandbox !== undefined && opts.fromSandbox !== null;
    if (hasDockerfile === hasSandbox) {
      throw new InvalidArgumentError('a template build takes either dockerfile or fromSandbox');
    }
    const body: Record<string, unknown> = { name: opts.name };
    if (opts.project !== undefined) body.project = opts.project;
    if (opts.public) body.public = true;
    if (hasSandbox) {
      if (opts.context !== undefined || opts.buildArgs !== undefined) {
        throw new InvalidArgumentError('fromSandbox takes no context or buildArgs');
      }
      body.from_sandbox = sandboxId(opts.fromSandbox);
      const http = new HttpClient(resolveConfig(opts));
      return toTemplateInfo((await http.json('POST', '/v1/templates', body)) as W['TemplateInfo']);
    }
    if (typeof opts.dockerfile !== 'string') throw new InvalidArgumentError("dockerfile must be the Dockerfile's text");
    body.dockerfile = opts.dockerfile;
    if (opts.buildArgs !== undefined && opts.buildArgs !== null) {
      if (!isPlainObject(opts.buildArgs)) throw new InvalidArgumentError('buildArgs must be an object of strings');
      const args: Record<string, string> = {};
      for (const [k, v] of Object.entries(opts.buildArgs)) if (v !== undefined) args[k] = String(v);
      if (Object.keys(args).length) body.build_args = args;
    }
    if (opts.cancelOnDisconnect) body.cancel_on_disconnect = true;
    const timeoutMs: unknown = opts.timeoutMs;
    if (timeoutMs !== undefined && !(typeof timeoutMs === 'number' && Number.isFinite(timeoutMs) && timeoutMs > 0)) {
      throw new InvalidArgumentError('timeoutMs must be a positive number of milliseconds');
    }
    const http = new HttpClient(resolveConfig(opts));
    if (opts.context !== undefined && opts.context !== null) body.context = await contextBytes(opts.context);

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
        const frame = raw as Partial<Record<string, unknown>> & {
          index?: number;
          total?: number;
          name?: string;
          stream?: 'stdout' | 'stderr';
          text?: string;
          template?: W['TemplateInfo'];
          error?: Partial<W['ErrorBody']>;
        };
        switch (frame.type) {
          case 'step':
            await callbacks.call(opts.onStep, { index: frame.index as number, total: frame.total as number, name: frame.name as string });
            break;
          case 'log':
            log += frame.text ?? '';
            if (log.length > 2 * MAX_LOG_CHARS) log = log.slice(-MAX_LOG_CHARS);
            await callbacks.call(opts.onLog, { stream: frame.stream as 'stdout' | 'stderr', text: frame.text ?? '' });
            break;
          case 'done':
            return toTemplateInfo(frame.template ?? ({} as W['TemplateInfo']));
          case 'error':
            throw new TemplateBuildError(frame.error?.message ?? 'the template build failed', {
              code: frame.error?.code ?? 'build_failed',
              log: log.slice(-MAX_LOG_CHARS),
            });
          default:
            break; // event types this SDK does not know
        }
      }
    } catch (err) {
      ctrl.abort(err);
      const timedOut =
        `the template build took longer than timeoutMs (${timeoutMs} ms); it goes on on the server unless cancelOnDisconnect`;
      throw streamError(err, callbacks, opts.signal, 'during the template build', timedOut);
    }
    throw new SandboxError(
      'the template build stream ended before its `done` or `error` event (the server went away; the build may go on: see Templates.get)',
      { code: 'stream_ended' },
    );
  }

  /**
   * A template of a running or paused sandbox's files (of the same project): its writable layer,
   * copied with its processes frozen (nothing of its memory), becomes a layer over its template.
   */
  static async fromSandbox(opts: TemplateFromSandboxOptions): Promise<TemplateInfo> {
    if (!isPlainObject(opts)) throw new InvalidArgumentError('Templates.fromSandbox takes { name, sandbox }');
    const { sandbox, ...rest } = opts;
    // (`null` when absent: `build` then says that a build takes dockerfile or fromSandbox)
    return Templates.build({ ...rest, fromSandbox: (sandbox ?? null) as CodeSandbox | string });
  }

  /** The key's project's templates, the public ones and the built-ins. */
  static async list(opts: TemplateListOptions = {}): Promise<TemplateInfo[]> {
    const http = new HttpClient(resolveConfig(opts));
    const list = (await http.json('GET', `/v1/templates${query({ project: opts.project })}`)) as W['TemplateList'] | undefined;
    return (list?.templates ?? []).map(toTemplateInfo);
  }

  /** {@link NotFoundError} if the key cannot see it. */
  static async get(name: string, opts: TemplateListOptions = {}): Promise<TemplateInfo> {
    const http = new HttpClient(resolveConfig(opts));
    return toTemplateInfo(
      (await http.json('GET', `/v1/templates/${key(name)}${query({ project: opts.project })}`)) as W['TemplateInfo'],
    );
  }

  /** {@link NotFoundError} if there is none; {@link TemplateInUseError} while another template is built on it. */
  static async delete(name: string, opts: TemplateListOptions = {}): Promise<void> {
    const http = new HttpClient(resolveConfig(opts));
    await http.json('DELETE', `/v1/templates/${key(name)}${query({ project: opts.project })}`);
  }
}
