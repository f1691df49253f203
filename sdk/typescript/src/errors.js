// Typed errors of the Lizard SDK, and the mapping from the server's error body `{code, message}`
// (and HTTP status) to them. It does not cover errors *inside* a cell: a Python exception or a
// Bash exit status is an `ExecutionError` in `Execution.error` (see execution.js), never thrown.

/**
 * Base class of every error the SDK throws. `code` is the server's stable error code
 * (`not_found`, `unauthenticated`, …) or an SDK one (`invalid_argument`, `timeout`, `connection`,
 * `stream_ended`); `status` is the HTTP status when the error came from a response.
 */
export class LizardError extends Error {
  /**
   * @param {string} message
   * @param {{ code?: string, status?: number, cause?: unknown }} [opts]
   */
  constructor(message, opts = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    /** @type {string} */
    this.code = opts.code ?? 'unknown';
    /** @type {number | undefined} */
    this.status = opts.status;
  }
}

/** The request was malformed or an argument is invalid (`invalid_request`, 400; also 413, 415). */
export class InvalidArgumentError extends LizardError {
  constructor(message, opts = {}) {
    super(message, { code: 'invalid_argument', ...opts });
  }
}

/** Missing or wrong API key (`unauthenticated`, 401). */
export class AuthenticationError extends LizardError {
  constructor(message, opts = {}) {
    super(message, { code: 'unauthenticated', ...opts });
  }
}

/** The sandbox, context, template, volume or project does not exist or is not visible to this key (`not_found`, 404). */
export class NotFoundError extends LizardError {
  constructor(message, opts = {}) {
    super(message, { code: 'not_found', ...opts });
  }
}

/** The request conflicts with the object's state, e.g. running code in a paused sandbox (`conflict`, 409). */
export class ConflictError extends LizardError {
  constructor(message, opts = {}) {
    super(message, { code: 'conflict', ...opts });
  }
}

/** The volume is mounted by a running or paused sandbox (`volume_in_use`, 409); delete it with
 * `force: true` to kill those sandboxes first. A `ConflictError`. */
export class VolumeInUseError extends ConflictError {
  constructor(message, opts = {}) {
    super(message, { code: 'volume_in_use', ...opts });
  }
}

/** Another template is built on this one (`template_in_use`, 409): delete that one first. A
 * `ConflictError`. */
export class TemplateInUseError extends ConflictError {
  constructor(message, opts = {}) {
    super(message, { code: 'template_in_use', ...opts });
  }
}

/** A template build failed: the Dockerfile is invalid (`invalid_dockerfile`, before the build or
 * found late, e.g. a `COPY` source missing from the context; the message names the line) or a step
 * failed (`build_failed`, naming its line). `log` is the build output the client received (its
 * last 1 MiB; empty when nothing was built). */
export class TemplateBuildError extends LizardError {
  /**
   * @param {string} message
   * @param {{ code?: string, status?: number, cause?: unknown, log?: string }} [opts]
   */
  constructor(message, opts = {}) {
    super(message, { code: 'build_failed', ...opts });
    /** @type {string} */
    this.log = opts.log ?? '';
  }
}

/** Too many requests (`rate_limited`, 429). */
export class RateLimitError extends LizardError {
  constructor(message, opts = {}) {
    super(message, { code: 'rate_limited', ...opts });
  }
}

/** A client-side deadline passed: the HTTP request took longer than `requestTimeoutMs`, or an
 * `exec` command ran past its `timeout`. A *cell* that passes `runCode`'s `timeoutMs` is not thrown:
 * it ends with `execution.error.name === 'Timeout'`. */
export class TimeoutError extends LizardError {
  constructor(message, opts = {}) {
    super(message, { code: 'timeout', ...opts });
  }
}

/** The sandbox or the server failed: a sandbox/kernel could not be started or reached
 * (`unavailable`, 503), an internal server error (`internal`, 500), or an execution stream that
 * ended without its `end` event. */
export class SandboxError extends LizardError {
  constructor(message, opts = {}) {
    super(message, { code: 'internal', ...opts });
  }
}

/** The server could not be reached at all (connection refused, DNS, reset). */
export class ConnectionError extends LizardError {
  constructor(message, opts = {}) {
    super(message, { code: 'connection', ...opts });
  }
}

/** A command of `sandbox.commands` exited with a non-zero status or was killed by a signal. The
 * whole {@link CommandResult} is attached as `result` (and its fields are copied for convenience). */
export class CommandExitError extends LizardError {
  /**
   * @param {{ pid: number, exitCode: number, stdout: string, stderr: string, signal?: string }} result
   * @param {string} [command]
   */
  constructor(result, command) {
    const how = result.signal ? `was killed by ${result.signal}` : `exited with status ${result.exitCode}`;
    super(`command ${command !== undefined ? `${JSON.stringify(command)} ` : ''}${how}`, { code: 'command_exit' });
    this.result = result;
    this.exitCode = result.exitCode;
    this.stdout = result.stdout;
    this.stderr = result.stderr;
    this.signal = result.signal;
  }
}

const BY_CODE = {
  invalid_request: InvalidArgumentError,
  payload_too_large: InvalidArgumentError,
  unsupported_media_type: InvalidArgumentError,
  unauthenticated: AuthenticationError,
  not_found: NotFoundError,
  conflict: ConflictError,
  volume_in_use: VolumeInUseError,
  template_in_use: TemplateInUseError,
  invalid_dockerfile: TemplateBuildError,
  build_failed: TemplateBuildError,
  rate_limited: RateLimitError,
  unavailable: SandboxError,
  unsupported: SandboxError,
  internal: SandboxError,
};

const BY_STATUS = {
  400: InvalidArgumentError,
  401: AuthenticationError,
  403: AuthenticationError,
  404: NotFoundError,
  405: InvalidArgumentError,
  409: ConflictError,
  413: InvalidArgumentError,
  415: InvalidArgumentError,
  429: RateLimitError,
  408: TimeoutError,
  504: TimeoutError,
};

/**
 * The typed error for a non-2xx response. `body` is the parsed `{code, message}` when the server
 * sent one; the class is chosen by `code` first, then by HTTP status.
 * @param {number} status
 * @param {unknown} body
 * @param {string} [fallbackText]
 * @returns {LizardError}
 */
export function errorFromResponse(status, body, fallbackText) {
  const code = body && typeof body === 'object' && typeof body.code === 'string' ? body.code : undefined;
  const message =
    body && typeof body === 'object' && typeof body.message === 'string'
      ? body.message
      : fallbackText?.trim() || `HTTP ${status}`;
  const Cls = (code && BY_CODE[code]) || BY_STATUS[status] || (status >= 500 ? SandboxError : LizardError);
  return new Cls(message, { code: code ?? `http_${status}`, status });
}
