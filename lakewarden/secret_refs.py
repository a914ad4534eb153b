"""Secret references: a catalog property given as `{"env": NAME}` or `{"file": PATH}`,
read by each process when it loads the catalog, and the rule for what one may name.

- `{"file": PATH}`: a regular file inside the secrets directory (`LAKEWARDEN_SECRETS_DIR`,
  default `<data_dir>/secrets`, where secrets are mounted), PATH relative to it or
  absolute, checked once symlinks and `..` are resolved (a Kubernetes secret volume's
  `..data` links stay inside it); UTF-8, at most MAX_FILE_BYTES.
- `{"env": NAME}`: a variable whose name starts with `LAKEWARDEN_SECRETS_ENV_PREFIX`
  (default `LW_SECRET_`) and that is none of lakewarden's own `LAKEWARDEN_*` settings.

Why: whoever registers a catalog chooses where its properties are sent (a REST endpoint
of their own) and reads its errors, so a reference to any file or variable would hand
them the host's files (/etc/passwd, /proc/self/environ) and the control-plane database's
URL. A refusal names the rule and the reference as sent, never anything read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lakewarden.redact import remember
from lakewarden.settings import Settings

# A secret is a password, a token or a key file, not a document.
MAX_FILE_BYTES = 64 * 1024
# Variables with this prefix (any case: pydantic-settings reads them so) are lakewarden's
# own settings: the database URL, alert sink URLs, ... never a reference's.
SETTINGS_PREFIX = str(Settings.model_config.get("env_prefix", "LAKEWARDEN_")).upper()
FORMS = '{"env": "NAME"} or {"file": "PATH"}'


class RefRefused(ValueError):
    """A reference the rules refuse, or one that cannot be read (the message says which
    and what to do, quoting nothing that was read)."""


@dataclass(frozen=True)
class RefRules:
    """What references may name, from the settings."""

    secrets_dir: Path
    env_prefix: str

    @classmethod
    def of(cls, settings: Settings) -> RefRules:
        return cls(settings.secrets_path, settings.secrets_env_prefix)

    def hint(self) -> str:
        """How to give a secret, for a message telling someone to use a reference."""
        return (
            f'{{"env": "{self.env_prefix}…"}} or {{"file": "NAME"}} (a file in the secrets '
            f"directory {str(self.secrets_dir)!r})"
        )


def check(key: str, ref: Mapping[str, str], rules: RefRules) -> None:
    """RefRefused unless the reference names what the rules allow (nothing is read)."""
    if set(ref) == {"env"}:
        _allowed_variable(key, ref["env"], rules)
    elif set(ref) == {"file"}:
        _allowed_path(key, ref["file"], rules)
    else:
        raise RefRefused(f"catalog property {key!r}: give a string, {FORMS}")


def read(key: str, ref: Mapping[str, str], rules: RefRules) -> str:
    """The secret the reference names, once the rules allow it; from now on masked in
    whatever this process redacts (`redact.remember`)."""
    check(key, ref, rules)
    if "file" in ref:
        value = _read_file(key, ref["file"], _allowed_path(key, ref["file"], rules))
    else:
        name = ref["env"]
        if name not in os.environ:
            raise RefRefused(
                f"catalog property {key!r} names environment variable {name!r}, which is "
                "not set in this process"
            )
        value = os.environ[name]
    remember(value)
    return value


def _allowed_variable(key: str, name: str, rules: RefRules) -> None:
    if name.upper().startswith(SETTINGS_PREFIX) or not name.startswith(rules.env_prefix):
        raise RefRefused(
            f"catalog property {key!r} names environment variable {name!r}: a reference "
            f"may name only a variable whose name starts with {rules.env_prefix!r} "
            f"(LAKEWARDEN_SECRETS_ENV_PREFIX), never a {SETTINGS_PREFIX}* setting"
        )


def _allowed_path(key: str, file: str, rules: RefRules) -> Path:
    """The real path of `file`, once it is inside the secrets directory."""
    try:
        base = Path(os.path.realpath(rules.secrets_dir))
        path = Path(os.path.realpath(base / file))  # an absolute `file` stands alone
    except (ValueError, OSError):  # a NUL, a symlink loop
        path = base = Path("/")
    if path == base or not path.is_relative_to(base):
        raise RefRefused(
            f"catalog property {key!r} names file {file!r}, which is not inside the secrets "
            f"directory {str(rules.secrets_dir)!r} (LAKEWARDEN_SECRETS_DIR; symlinks and "
            "'..' are resolved first): put the secret in a file there and name that"
        )
    return path


def _read_file(key: str, file: str, path: Path) -> str:
    def refused(why: str) -> RefRefused:
        return RefRefused(f"catalog property {key!r} names file {file!r}, which {why}")

    try:
        # O_NOFOLLOW: a symlink put in place of the checked file is not followed out of
        # the directory; O_NONBLOCK: a FIFO does not hold the request (refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise refused(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refused("is not a regular file")
        data = b""
        while len(data) <= MAX_FILE_BYTES and (chunk := os.read(fd, MAX_FILE_BYTES + 1)):
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise refused(f"is larger than {MAX_FILE_BYTES // 1024} KiB (a secret is not)")
    try:
        return data.decode().removesuffix("\n")
    except UnicodeDecodeError:
        raise refused("is not UTF-8 text") from None
