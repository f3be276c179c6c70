"""What a credential looks like, so that none goes into a handoff.

A handoff is saved to disk and replayed into the conversation, so a secret in it would
outlive the compaction meant to drop it. :func:`credential_kind` names the kind of secret a
text appears to hold (never the secret itself). Three sorts of rule:

* vendor token formats, anchored on their prefixes so that prose mentioning a prefix
  (``ghp_``, ``AKIA``, ``sk-learn``) does not match;
* a password in a URL (``scheme://user:password@host``);
* a secret-named key given a value (``DB_PASSWORD=…``, ``"password": "…"``, ``the db
  password is …``) when the value looks like a credential rather than a placeholder, a
  reference to where the secret lives, a number, or code.

The corpus in ``tests/store/secret_corpus.py`` decides these rules: every refused form is
caught and no legitimate text (SHAs, UUIDs, paths, prose about password fields or token
budgets, code identifiers) is. ``bench/secret_detectors.py`` compares them with ``detect-secrets``.
"""

from __future__ import annotations

import re

_NOT_WORD = r"(?<![A-Za-z0-9_])"
_NOT_TOKEN = r"(?<![A-Za-z0-9_-])"

_VENDOR_TOKENS: tuple[tuple[str, str], ...] = (
    ("a private key block", r"(?i)-----begin (?:[a-z0-9]+ )*private key(?: block)?-----"),
    ("an Authorization header", r"(?i)authorization\s*:\s*(?:bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"),
    ("a JSON Web Token", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    ("an OpenAI or Anthropic API key", _NOT_TOKEN + r"sk-(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}"),
    ("a Stripe secret key", _NOT_WORD + r"(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})"),
    ("a GitHub token", _NOT_WORD + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ("a GitLab token", _NOT_TOKEN + r"glpat-[A-Za-z0-9_-]{20,}"),
    ("a Slack token", r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("a Slack webhook", r"hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]{16,}"),
    ("an AWS access key id", r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}(?![A-Z0-9])"),
    ("an Azure storage or service bus key", r"(?i)(?:AccountKey|SharedAccessKey)\s*=\s*[A-Za-z0-9+/]{20,}={0,2}"),
    ("a Google API key", _NOT_TOKEN + r"AIza[0-9A-Za-z_-]{35}"),
    ("a Google OAuth client secret", _NOT_TOKEN + r"GOCSPX-[A-Za-z0-9_-]{20,}"),
    ("a Hugging Face token", _NOT_WORD + r"hf_[A-Za-z0-9]{30,}"),
    ("a SendGrid API key", _NOT_TOKEN + r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    ("a Twilio API key", r"(?<![A-Za-z0-9])SK[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
    ("an npm token", _NOT_WORD + r"npm_[A-Za-z0-9]{36}"),
    ("a PyPI token", _NOT_TOKEN + r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{20,}"),
    ("a Telegram bot token", r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_-]{30,}"),
    ("a Discord bot token", r"(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,}"),
    ("a Mailchimp API key", r"(?<![0-9a-f])[0-9a-f]{32}-us[0-9]{1,2}\b"),
    ("a Square token", _NOT_TOKEN + r"sq0(?:atp|csp)-[A-Za-z0-9_-]{22,}"),
    ("a Databricks token", _NOT_WORD + r"dapi[0-9a-f]{32}"),
    ("a DigitalOcean token", _NOT_WORD + r"do[por]_v1_[0-9a-f]{64}"),
    ("a Shopify token", _NOT_WORD + r"shp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}"),
)

# Every run is bounded or anchored by a look-behind, so that a search stays linear in the text
# (a handoff is up to 32,000 bytes, and an unanchored run would make a scan quadratic).
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s/:@]{0,256}:"
                           r"(?P<value>[^\s/@]{1,256})@")

# A key whose value is a secret: the last word of the identifier names it (DB_PASSWORD,
# aws_secret_access_key, client_secret, auth_token), so password_field or token_budget do not.
# The key starts a word or follows a separator (_ . -), which anchors the search.
_SECRET_KEY = (r"(?:pass(?:word|wd|phrase)|pwd|secret|token|api[_ -]?key|access[_ -]?key|auth[_ -]?key"
               r"|private[_ -]?key|secret[_ -]?key|client[_ -]?secret|credentials?)")
_ASSIGNED = re.compile(
    r"(?i)(?:(?<=[_.-])|(?<![A-Za-z0-9]))" + _SECRET_KEY + r"(?![A-Za-z0-9_])"
    r"[\"']?(?:[ \t]{0,8}(?::=|=>|[:=])[ \t]{0,8}|[ \t]{1,8}(?:is|was|=)[ \t]{1,8}:?[ \t]{0,8})[\"']?"
    r"(?P<value>[^\s\"',;]{1,256})"
)
# Values that say where a secret is, or hide it: $VAR, ${VAR}, <redacted>, ***, os.environ[...],
# get_secret(), settings.KEY, an environment variable's name.
_PLACEHOLDER = re.compile(r"\A[$<{*%]|[(\[]|\A[A-Z][A-Z0-9_]*\Z|\A[A-Za-z_]+\.[A-Za-z_.]+\Z")
_PLACEHOLDER_WORDS = frozenset({"password", "pass", "passwd", "secret", "changeme", "redacted", "none", "null",
                                "example", "placeholder", "hidden", "masked", "xxx", "xxxx", "xxxxxxxx"})


def _is_placeholder(value: str) -> bool:
    return value.lower() in _PLACEHOLDER_WORDS or _PLACEHOLDER.search(value) is not None


def _looks_like_a_secret(value: str) -> bool:
    """6+ characters, letters with digits (or both cases and a symbol), and not a placeholder."""
    value = value.rstrip(".)")
    if len(value) < 6 or _is_placeholder(value):
        return False
    has_letter = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    mixed_case_and_symbol = (any(c.isupper() for c in value) and any(c.islower() for c in value)
                             and any(not c.isalnum() and c not in "-_" for c in value))
    return has_letter and (has_digit or mixed_case_and_symbol)


_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((kind, re.compile(p)) for kind, p in _VENDOR_TOKENS)


def credential_kind(text: str) -> str | None:
    """The kind of secret ``text`` appears to contain, or ``None``."""
    for kind, pattern in _RULES:
        if pattern.search(text):
            return kind
    for match in _URL_PASSWORD.finditer(text):
        value = match["value"]
        if len(value) >= 4 and not value.isdigit() and not _is_placeholder(value):  # digits: a port
            return "a password in a URL"
    for match in _ASSIGNED.finditer(text):
        if _looks_like_a_secret(match["value"]):
            return "a password or secret value"
    return None


_IDENTIFIER = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,39}\Z")


def shown_key(key: object) -> str:
    """A caller's key as an error may name it: a short identifier that is no credential, else ``<key>``.

    An unknown key is the caller's text, so it could be a value in disguise.
    """
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    if isinstance(key, str) and _IDENTIFIER.match(key) and credential_kind(key) is None:
        return key
    return "<key>"
