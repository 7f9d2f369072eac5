"""The replay's certificate trust: one certificate that verifies nothing.

Hermes builds an OpenAI client for every provider request, and with it an SSL context loaded from
the system's or certifi's CA bundle (40-55 ms of CPU per request here: a third of a replay's CPU).
A replay talks plain HTTP to its replay LLM on 127.0.0.1 and must reach nothing else, so no bundle
is needed: while it runs, the certificate variables Hermes and httpx read name one self-signed
certificate whose private key was discarded when it was made. Loading it costs under 1 ms, no
request or engine input changes, and any TLS connection a replay might still attempt fails
verification instead of reaching a server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict

# Read, in this order, by Hermes' provider clients (0.18 on: HERMES_CA_BUNDLE first) and by httpx
# (SSL_CERT_FILE, when the client is given verify=True, as 0.16-0.17 and 0.22 do).
CA_VARIABLES = ("HERMES_CA_BUNDLE", "SSL_CERT_FILE")
FILE_NAME = "trust-nothing-ca.pem"

# made with: openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes
#            -keyout /dev/null -subj "/CN=observed-engine replay: trusts nothing (key discarded)"
#            -days 36500
TRUST_NOTHING_PEM = """\
-----BEGIN CERTIFICATE-----
MIIB2DCCAX+gAwIBAgIUP06sTdUc6CFivM7qcJvUCNcL120wCgYIKoZIzj0EAwIw
QTE/MD0GA1UEAww2b2JzZXJ2ZWQtZW5naW5lIHJlcGxheTogdHJ1c3RzIG5vdGhp
bmcgKGtleSBkaXNjYXJkZWQpMCAXDTI2MTIwNzEwNTcwNloYDzIxMjYxMTEzMTA1
NzA2WjBBMT8wPQYDVQQDDDZvYnNlcnZlZC1lbmdpbmUgcmVwbGF5OiB0cnVzdHMg
bm90aGluZyAoa2V5IGRpc2NhcmRlZCkwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC
AAQTmSc9YTPoxURsHbSQJZah1QnKZ2JU+J5Ey1vlTTSt2Tnf/j8CJstxDI9KJr4e
dS/0VREXMdxZg/N3UnupV9Mdo1MwUTAdBgNVHQ4EFgQUe0bBZNMGxYEY0buZi14Z
zs7TQ64wHwYDVR0jBBgwFoAUe0bBZNMGxYEY0buZi14Zzs7TQ64wDwYDVR0TAQH/
BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiABewaGAG7EtdBZPBoWpGXZdaviuha9
BkiRgkU3L8xurAIgSIQImHrqMfaFBsnrcjsIKXHVB/qojmvb5A3sU1ngYR0=
-----END CERTIFICATE-----
"""


def trust_nothing_environment(directory: Path) -> Dict[str, str]:
    """Write the certificate into ``directory`` (the replay's own scratch directory) and return
    the variables that point Hermes' and httpx's clients at it."""
    path = Path(directory) / FILE_NAME
    path.write_text(TRUST_NOTHING_PEM, encoding="ascii")
    return {name: str(path) for name in CA_VARIABLES}
