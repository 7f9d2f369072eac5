"""The token-counting helper process (run by path by :mod:`.helper`, never imported by the engine).

Standard input: one JSON line ``{"path": [...], "encoding": name}``, then requests; standard
output: ``OK\\n`` once the encoding is loaded (or ``ERR <reason>\\n`` and exit), then one reply per
request. A request is ``<n: u32>`` and ``n`` times ``<length: u32><UTF-8 bytes>``; its reply is
``n`` times ``<tokens: u32>``: ``len(encoding.encode(text, disallowed_special=()))``, exactly what
the counter computes in-process. The process ends at end-of-file on standard input, that is when
the engine's process closes its end or is gone.
"""
# Only the standard library here until the hello has put the engine's sys.path in place.

import hashlib
import json
import marshal
import os
import struct
import sys
import uuid

# The parsed ranks of an encoding file, kept beside it in tiktoken's cache dir so that later helpers
# skip the parsing (~0.18 s of CPU for o200k_base): marshal of {token bytes: rank}, behind a header
# naming the source file's sha256 and the payload's. A file that does not check out is ignored
# (and rewritten); the ranks are then parsed from the source file as tiktoken does.
_MAGIC = b"observed-engine ranks 1\n"


def _ranks_cache_path(expected_hash):
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or ""
    if not cache_dir or not expected_hash:
        return None
    return os.path.join(cache_dir, f"observed-engine-ranks-{expected_hash}.marshal")


def _read_ranks(path, expected_hash):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    head, sep, payload = data.partition(b"\n\n")
    if not sep or head != _MAGIC + f"{expected_hash} {hashlib.sha256(payload).hexdigest()}".encode():
        return None
    try:
        ranks = marshal.loads(payload)
    except Exception:  # another Python's marshal format: None, the ranks are parsed again and rewritten
        return None
    return ranks if isinstance(ranks, dict) else None


def _write_ranks(path, expected_hash, ranks):
    payload = marshal.dumps(ranks)
    head = _MAGIC + f"{expected_hash} {hashlib.sha256(payload).hexdigest()}".encode()
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(head + b"\n\n" + payload)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass


def _cached_loader(load_tiktoken_bpe):
    """tiktoken's load_tiktoken_bpe, with the parsed ranks cached as above."""

    def load(blobpath, expected_hash=None):
        path = _ranks_cache_path(expected_hash)
        if path is not None:
            ranks = _read_ranks(path, expected_hash)
            if ranks is not None:
                return ranks
        ranks = load_tiktoken_bpe(blobpath, expected_hash)   # checks the source file's sha256
        if path is not None:
            _write_ranks(path, expected_hash, ranks)
        return ranks

    return load


def _read_exact(stream, n):
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError
    return data


def main():
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        # The lowest CPU priority: loading the encoding (~0.25 s of CPU) and counting must never take a
        # core from the host or its provider (on 2 cores, it cost the first compression turn ~40 ms).
        # The engine's worker waits for the counts off the host's thread.
        os.nice(19)
    except (AttributeError, OSError):
        pass
    try:
        # and, where the system has it, the idle scheduling class: run only on a CPU nobody else wants
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    try:
        hello = json.loads(stdin.readline() or b"{}")
        sys.path[:0] = [p for p in hello.get("path", []) if isinstance(p, str)]
        import tiktoken

        try:
            import tiktoken_ext.openai_public as public

            public.load_tiktoken_bpe = _cached_loader(public.load_tiktoken_bpe)
        except Exception:  # another tiktoken layout: parse as tiktoken does
            pass
        encoding = tiktoken.get_encoding(hello["encoding"])
        encode = encoding.encode
    except Exception as exc:  # the engine's process falls back to loading it itself
        stdout.write(f"ERR {type(exc).__name__}: {exc}".replace("\n", " ").encode("utf-8", "replace") + b"\n")
        stdout.flush()
        return
    stdout.write(b"OK\n")
    stdout.flush()
    u32 = struct.Struct("<I")
    while True:
        try:
            (n,) = u32.unpack(_read_exact(stdin, 4))
            counts = []
            for _ in range(n):
                (length,) = u32.unpack(_read_exact(stdin, 4))
                text = _read_exact(stdin, length).decode("utf-8")
                counts.append(len(encode(text, disallowed_special=())))
        except EOFError:
            return
        stdout.write(struct.pack(f"<{n}I", *counts))
        stdout.flush()


if __name__ == "__main__":
    main()
