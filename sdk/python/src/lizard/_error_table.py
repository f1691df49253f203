# generated from sdk/errors.json by scripts/gen_errors.py; do not edit.

"""Error code and HTTP status → the name of the SDK's error class (see ``errors.py``)."""

BY_CODE = {
    "build_failed": "TemplateBuildError",
    "conflict": "ConflictError",
    "insufficient_storage": "SandboxError",
    "internal": "SandboxError",
    "invalid_dockerfile": "TemplateBuildError",
    "invalid_request": "InvalidArgumentError",
    "not_found": "NotFoundError",
    "payload_too_large": "InvalidArgumentError",
    "permission_denied": "AuthenticationError",
    "rate_limited": "RateLimitError",
    "template_in_use": "TemplateInUseError",
    "unauthenticated": "AuthenticationError",
    "unavailable": "SandboxError",
    "unsupported": "SandboxError",
    "unsupported_media_type": "InvalidArgumentError",
    "volume_in_use": "VolumeInUseError",
}

BY_STATUS = {
    400: "InvalidArgumentError",
    401: "AuthenticationError",
    403: "AuthenticationError",
    404: "NotFoundError",
    405: "InvalidArgumentError",
    408: "TimeoutError",
    409: "ConflictError",
    413: "InvalidArgumentError",
    415: "InvalidArgumentError",
    429: "RateLimitError",
    504: "TimeoutError",
}
