"""Request bodies of `/v1` as pydantic models: the first error of a body is its 400 message."""

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .. import hooks


def first_error(exc: ValidationError) -> str:
    """The message of a model's first error, as the validator raised it."""
    error = exc.errors()[0]
    cause = (error.get("ctx") or {}).get("error")
    return str(cause) if cause is not None else error["msg"]


class ClaudeCodeHook(BaseModel):
    """What Claude Code posts to `POST /v1/hooks/claude-code` (SPEC 17.1). Fields are checked in
    the order the contract gives (the event, `tool_name`, `tool_input`); the others Claude Code
    sends (`transcript_path`, `permission_mode`, `permission_suggestions`, ...) are kept."""

    model_config = ConfigDict(extra="allow", validate_default=True)

    hook_event_name: object = None
    tool_name: object = None
    tool_input: object = None
    session_id: object = None
    cwd: object = None
    tool_use_id: object = None

    @field_validator("hook_event_name", mode="before")
    @classmethod
    def _event(cls, value: object) -> str:
        if value not in hooks.EVENTS:
            shown = value if isinstance(value, str) else "" if value is None else str(value)
            raise ValueError(f"unsupported hook event: {shown}")
        return value

    @field_validator("tool_name", mode="before")
    @classmethod
    def _tool_name(cls, value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError("tool_name is required")
        return value

    @field_validator("tool_input", mode="before")
    @classmethod
    def _tool_input(cls, value: object) -> dict:
        if not isinstance(value, dict):
            raise ValueError("tool_input must be an object")
        return value

    @field_validator("session_id", "cwd", "tool_use_id", mode="before")
    @classmethod
    def _text(cls, value: object) -> str:
        return value if isinstance(value, str) else ""
