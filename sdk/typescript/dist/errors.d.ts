import type { CommandResult } from './commands.js';
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
export declare class LizardError extends Error {
    readonly code: string;
    readonly status?: number;
    constructor(message: string, opts?: LizardErrorOptions);
}
/** Invalid argument or malformed request (400, 413, 415), also thrown before any request for bad options. */
export declare class InvalidArgumentError extends LizardError {
    constructor(message: string, opts?: LizardErrorOptions);
}
/** Missing or unknown API key (401). */
export declare class AuthenticationError extends LizardError {
    constructor(message: string, opts?: LizardErrorOptions);
}
/** No such sandbox, context, template, volume or project visible to this key (404). */
export declare class NotFoundError extends LizardError {
    constructor(message: string, opts?: LizardErrorOptions);
}
/** The request conflicts with the object's state, e.g. running code in a paused sandbox (409). */
export declare class ConflictError extends LizardError {
    constructor(message: string, opts?: LizardErrorOptions);
}
/** The volume is mounted by a running or paused sandbox (`volume_in_use`, 409); delete with `force: true`. */
export declare class VolumeInUseError extends ConflictError {
    constructor(message: string, opts?: LizardErrorOptions);
}
/** Another template is built on this one (`template_in_use`, 409). */
export declare class TemplateInUseError extends ConflictError {
    constructor(message: string, opts?: LizardErrorOptions);
}
/** A template build failed: `code` is `invalid_dockerfile` (the message names the line) or
 * `build_failed` (a step failed, naming its line); `log` is the output received (its last 1 MiB). */
export declare class TemplateBuildError extends LizardError {
    readonly log: string;
    constructor(message: string, opts?: LizardErrorOptions & {
        log?: string;
    });
}
/** Too many requests (429). */
export declare class RateLimitError extends LizardError {
    constructor(message: string, opts?: LizardErrorOptions);
}
/** A client-side deadline passed (`requestTimeoutMs`, `exec`'s `timeout`). */
export declare class TimeoutError extends LizardError {
    /** For an `exec` or `commands.run` timeout: what the command had printed. */
    result?: ExecResult | CommandResult;
    constructor(message: string, opts?: LizardErrorOptions);
}
/** The sandbox or server failed (503, 500), or an execution stream ended early. */
export declare class SandboxError extends LizardError {
    constructor(message: string, opts?: LizardErrorOptions);
}
/** The server could not be reached. */
export declare class ConnectionError extends LizardError {
    constructor(message: string, opts?: LizardErrorOptions);
}
/** A `commands.run` command (or a handle's `wait()`) exited non-zero or was killed by a signal. */
export declare class CommandExitError extends LizardError {
    readonly result: CommandResult;
    readonly exitCode: number;
    readonly stdout: string;
    readonly stderr: string;
    readonly signal?: string;
    constructor(result: CommandResult, command?: string);
}
/**
 * The typed error for a non-2xx response. `body` is the parsed `{code, message}` when the server
 * sent one; the class is chosen by `code` first, then by HTTP status.
 */
export declare function errorFromResponse(status: number, body: unknown, fallbackText?: string): LizardError;
