"""config.yaml, edited in place: a round trip that keeps comments, key order,
quoting and indentation (ruamel.yaml), with PyYAML as the fallback when
ruamel.yaml is missing (comments lost; the backup keeps them)."""

from __future__ import annotations

import datetime as _dt
import io
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .errors import CliError
from .inputs import describe
from .paths import BACKUP_PREFIX


class ConfigDoc:
    """config.yaml loaded for editing: ruamel.yaml round-trip (comments, order
    and quoting survive), PyYAML (comments lost) when ruamel is missing."""

    def __init__(self, path: Path):
        self.path = path
        self.original = read_text(path)
        self.round_trip = True
        try:
            from ruamel.yaml import YAML
        except ImportError:
            self.round_trip = False
        # Hermes reads the file with PyYAML: what it cannot read is refused first, with its
        # line and column, before ruamel (stricter: duplicate keys) has its say.
        hermes_view = parse(path, self.original)
        if self.round_trip:
            self._yaml = YAML()
            self._yaml.preserve_quotes = True
            self._yaml.width = 4096
            if self.original.strip():
                mapping, sequence, offset = guess_indent(self.original)
                self._yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
                data = _load(path, lambda: self._yaml.load(self.original))
            else:
                data = None
            if data is None and hermes_view is None:
                data = self._new_map()
        else:
            data = hermes_view if hermes_view is not None else {}
        if not isinstance(data, dict):
            raise CliError(f"{path}: the top level is {describe(data)}, not a mapping of keys; fix: the "
                           f"file must hold keys such as `model:` and `context:`")
        self.data = data

    def _new_map(self):
        if self.round_trip:
            from ruamel.yaml.comments import CommentedMap
            return CommentedMap()
        return {}

    def get(self, *keys, default=None):
        node: Any = self.data
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    def set(self, keys: Tuple[str, ...], value) -> bool:
        node = self.data
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = self._new_map()
            node = node[key]
        if keys[-1] in node and node[keys[-1]] == value:
            return False
        node[keys[-1]] = value
        return True

    def delete(self, keys: Tuple[str, ...]) -> bool:
        node = self.get(*keys[:-1]) if len(keys) > 1 else self.data
        if isinstance(node, dict) and keys[-1] in node:
            del node[keys[-1]]
            return True
        return False

    def add_section(self, key: str, mapping: Dict[str, Any], comment: str) -> None:
        if not self.round_trip:
            self.data[key] = mapping
            return

        def convert(value):
            if isinstance(value, dict):
                out = self._new_map()
                for k, v in value.items():
                    out[k] = convert(v)
                return out
            return value

        self.data[key] = convert(mapping)
        try:
            self.data.yaml_set_comment_before_after_key(key, before=comment, indent=0)
        except Exception:  # the comment is a courtesy; the key is written without it
            pass

    def dump(self) -> str:
        if self.round_trip:
            buf = io.StringIO()
            self._yaml.dump(self.data, buf)
            return buf.getvalue()
        import yaml
        return yaml.safe_dump(self.data, sort_keys=False, default_flow_style=False)

    def changed(self) -> bool:
        return self.dump() != self.original

    def save(self) -> Optional[Path]:
        """Write the file atomically, after a timestamped backup of the previous one;
        returns the backup path (None: there was no previous file)."""
        text = self.dump()
        backup_path = None
        # a symlinked config.yaml (dotfiles) is written through: the link stays a link
        target = self.path.resolve() if self.path.is_symlink() else self.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S.%f")
            backup_path = self.path.with_name(BACKUP_PREFIX + stamp)
            shutil.copy2(target, backup_path)
        tmp = target.with_name(target.name + ".observed-tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            if target.exists():
                try:
                    shutil.copymode(target, tmp)
                except OSError:
                    pass
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            if backup_path is not None:
                backup_path.unlink(missing_ok=True)
            raise
        self.original = text
        return backup_path


def read_text(path: Path) -> str:
    """config.yaml's text ("" when there is none); a directory, a special file, an unreadable or
    non-UTF-8 file is a CliError naming it."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}; fix: run as the user Hermes runs as") from None
    if stat.S_ISDIR(mode):
        raise CliError(f"{path} is a directory, where Hermes' config file belongs; fix: move it away "
                       f"(Hermes cannot read its config either)")
    if not stat.S_ISREG(mode):
        raise CliError(f"{path} is not a regular file; fix: replace it with the config file itself")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}; fix: run as the user Hermes runs as") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise CliError(f"{path} is not UTF-8 text (line {line}); fix: save it as UTF-8, as Hermes reads it") \
            from None


def parse(path: Path, text: str) -> Any:
    """*text* parsed as Hermes parses config.yaml (PyYAML, safe): the data, None for an empty
    document; a syntax error is a CliError with the line and the column."""
    import yaml

    if not text.strip():
        return None
    return _load(path, lambda: yaml.safe_load(text))


def _load(path: Path, load) -> Any:
    try:
        return load()
    except RecursionError:
        raise CliError(f"{path}: not valid YAML: nested too deeply to read; fix: correct the file") from None
    except Exception as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        if not _is_yaml_error(exc):
            raise
        raise CliError(f"{path}: not valid YAML{where}: {problem}; fix: correct the file there (Hermes "
                       f"cannot read it either and runs on its defaults)") from None


def _is_yaml_error(exc: Exception) -> bool:
    names = {cls.__module__.split(".")[0] for cls in type(exc).__mro__}
    return bool(names & {"yaml", "ruamel"}) or isinstance(exc, (ValueError, TypeError))


def guess_indent(text: str) -> Tuple[int, int, int]:
    """(mapping, sequence, offset) indentation of a YAML file, as ruamel's
    ``YAML.indent()`` takes them, so that a round trip rewrites nothing."""
    mapping = sequence = offset = None
    prev_indent = 0
    prev_opens_block = False
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if prev_opens_block and indent > prev_indent:
            dash = re.match(r"-\s+", stripped)
            if dash and offset is None:
                offset = indent - prev_indent
                sequence = offset + len(dash.group(0))
            elif not dash and mapping is None:
                mapping = indent - prev_indent
        if mapping is not None and offset is not None:
            break
        prev_indent = indent
        prev_opens_block = (not stripped.startswith("- ")
                            and re.match(r"^[^#'\"]*:\s*(#.*)?$", stripped) is not None)
    mapping = mapping or 2
    if offset is None:
        offset, sequence = 0, 2
    return mapping, max(sequence or 2, offset + 2), offset
