// Typed errors of the Lizard SDK, and the mapping from the server's error body `{code, message}`
// (and HTTP status) to them. It does not cover errors *inside* a cell: a Python exception or a
// Bash exit status is an `ExecutionError` in `Execution.error` (see execution.ts), never thrown.

import type { CommandResult } from './commands.js';
import { BY_CODE as CODE_NAMES, BY_STATUS as STATUS_NAMES } from './error-table.js';
import type { ExecResult } from './sandbox.js';

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
export class LizardError extends Error {
  readonly code: string;
  readonly status?: number;

  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = opts.code ?? 'unknown';
    this.status = opts.status;
  }
}

/** Invalid argument or malformed request (400, 413, 415), also thrown before any request for bad options. */
export class InvalidArgumentError extends LizardError {
  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'invalid_argument', ...opts });
  }
}

/** Missing or unknown API key (401). */
export class AuthenticationError extends LizardError {
  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'unauthenticated', ...opts });
  }
}

/** No such sandbox, context, template, volume or project visible to this key (404). */
export class NotFoundError extends LizardError {
  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'not_found', ...opts });
  }
}

/** The request conflicts with the object's state, e.g. running code in a paused sandbox (409). */
export class ConflictError extends LizardError {
  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'conflict', ...opts });
  }
}

/** The volume is mounted by a running or paused sandbox (`volume_in_use`, 409); delete with `force: true`. */
export class VolumeInUseError extends ConflictError {
  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'volume_in_use', ...opts });
  }
}

/** Another template is built on this one (`template_in_use`, 409). */
export class TemplateInUseError extends ConflictError {
  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'template_in_use', ...opts });
  }
}

/** A template build failed: `code` is `invalid_dockerfile` (the message names the line) or
 * `build_failed` (a step failed, naming its line); `log` is the output received (its last 1 MiB). */
export class TemplateBuildError extends LizardError {
  readonly log: string;

  constructor(message: string, opts: LizardErrorOptions & { log?: string } = {}) {
    super(message, { code: 'build_failed', ...opts });
    this.log = opts.log ?? '';
  }
}

/** Too many requests (429). */
export class RateLimitError extends LizardError {
  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'rate_limited', ...opts });
  }
}

/** A client-side deadline passed (`requestTimeoutMs`, `exec`'s `timeout`). */
export class TimeoutError extends LizardError {
  /** For an `exec` or `commands.run` timeout: what the command had printed. */
  result?: ExecResult | CommandResult;

  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'timeout', ...opts });
  }
}

/** The sandbox or server failed (503, 500), or an execution stream ended early. */
export class SandboxError extends LizardError {
  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'internal', ...opts });
  }
}

/** The server could not be reached. */
export class ConnectionError extends LizardError {
  constructor(message: string, opts: LizardErrorOptions = {}) {
    super(message, { code: 'connection', ...opts });
  }
}

/** A `commands.run` command (or a handle's `wait()`) exited non-zero or was killed by a signal. */
export class CommandExitError extends LizardError {
  readonly result: CommandResult;
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly signal?: string;

  constructor(result: CommandResult, command?: string) {
    const how = result.signal ? `was killed by ${result.signal}` : `exited with status ${result.exitCode}`;
    super(`command ${command !== undefined ? `${JSON.stringify(command)} ` : ''}${how}`, { code: 'command_exit' });
    this.result = result;
    this.exitCode = result.exitCode;
    this.stdout = result.stdout;
    this.stderr = result.stderr;
    this.signal = result.signal;
  }
}

type ErrorClass = new (message: string, opts?: LizardErrorOptions) => LizardError;

/** The mapping both SDKs share (sdk/errors.json, generated into error-table.ts), by class name. */
const CLASSES: Record<string, ErrorClass> = Object.fromEntries(
  [InvalidArgumentError, AuthenticationError, NotFoundError, ConflictError, VolumeInUseError,
    TemplateInUseError, TemplateBuildError, RateLimitError, TimeoutError, SandboxError].map((c) => [c.name, c]),
);

function resolveTable<K extends string | number>(table: Readonly<Record<K, string>>): Record<K, ErrorClass> {
  const out = {} as Record<K, ErrorClass>;
  for (const [key, name] of Object.entries(table) as [K, string][]) {
    const cls = CLASSES[name];
    if (!cls) throw new Error(`error-table.ts names an unknown error class: ${name}`);
    out[key] = cls;
  }
  return out;
}

const BY_CODE = resolveTable(CODE_NAMES);
const BY_STATUS = resolveTable(STATUS_NAMES);

/** The string at `body[key]`, when `body` is an object that has one. */
function stringField(body: unknown, key: string): string | undefined {
  if (!body || typeof body !== 'object') return undefined;
  const v: unknown = (body as Record<string, unknown>)[key];
  return typeof v === 'string' ? v : undefined;
}

/**
 * The typed error for a non-2xx response. `body` is the parsed `{code, message}` when the server
 * sent one; the class is chosen by `code` first, then by HTTP status.
 */
export function errorFromResponse(status: number, body: unknown, fallbackText?: string): LizardError {
  const code = stringField(body, 'code');
  const message = stringField(body, 'message') ?? (fallbackText?.trim() || `HTTP ${status}`);
  const Cls = (code && BY_CODE[code]) || BY_STATUS[status] || (status >= 500 ? SandboxError : LizardError);
  return new Cls(message, { code: code ?? `http_${status}`, status });
}
