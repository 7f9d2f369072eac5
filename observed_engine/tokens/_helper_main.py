"""The token-counting helper process (run by path by :mod:`.helper`, never imported by the engine).

Standard input: one JSON line ``{"path": [...], "encoding": name}``, then requests; standard
output: ``OK\\n`` once the encoding is loaded (or ``ERR <reason>\\n`` and exit), then one reply per
request. A request is ``<n: u32>`` and ``n`` times ``<length: u32><UTF-8 bytes>``; its reply is
``n`` times ``<tokens: u32>``: ``len(encoding.encode(text, disallowed_special=()))``, exactly what
the counter computes in-process. The process ends at end-of-file on standard input, that is when
the engine's process closes its end or is gone.
"""

import json
import struct
import sys


def _read_exact(stream, n):
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError
    return data


def main():
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        hello = json.loads(stdin.readline() or b"{}")
        sys.path[:0] = [p for p in hello.get("path", []) if isinstance(p, str)]
        import tiktoken

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
