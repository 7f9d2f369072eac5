"""config.yaml, edited in place: a round trip that keeps comments, key order,
quoting and indentation (ruamel.yaml), with PyYAML as the fallback when
ruamel.yaml is missing (comments lost; the backup keeps them)."""

from __future__ import annotations

import datetime as _dt
import io
import os
import re
import shutil
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .errors import CliError
from .paths import BACKUP_PREFIX


class ConfigDoc:
    """config.yaml loaded for editing: ruamel.yaml round-trip (comments, order
    and quoting survive), PyYAML (comments lost) when ruamel is missing."""

    def __init__(self, path: Path):
        self.path = path
        self.original = path.read_text(encoding="utf-8") if path.exists() else ""
        self.round_trip = True
        try:
            from ruamel.yaml import YAML
        except ImportError:
            self.round_trip = False
        if self.round_trip:
            self._yaml = YAML()
            self._yaml.preserve_quotes = True
            self._yaml.width = 4096
            if self.original.strip():
                mapping, sequence, offset = guess_indent(self.original)
                self._yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
                data = self._yaml.load(self.original)
            else:
                data = None
            if data is None:
                data = self._new_map()
        else:
            import yaml
            data = yaml.safe_load(self.original) if self.original.strip() else {}
            data = data or {}
        if not isinstance(data, dict):
            raise CliError(f"{path}: the top level is not a mapping; fix the file first")
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
        except Exception:
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S.%f")
            backup_path = self.path.with_name(BACKUP_PREFIX + stamp)
            shutil.copy2(self.path, backup_path)
        tmp = self.path.with_name(self.path.name + ".observed-tmp")
        tmp.write_text(text, encoding="utf-8")
        if self.path.exists():
            try:
                shutil.copymode(self.path, tmp)
            except OSError:
                pass
        os.replace(tmp, self.path)
        self.original = text
        return backup_path


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
