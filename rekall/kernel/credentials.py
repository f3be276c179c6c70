"""What a credential looks like, so that none goes into a handoff.

A handoff is saved to disk and replayed into the conversation, so a secret in it would
outlive the compaction meant to drop it. :func:`credential_kind` names the kind of secret a
text appears to hold (never the secret itself). It is a filter for the forms people write,
not a guarantee: a secret in a form no rule knows (a bare random word, a password spelled out
in prose without a keyword) passes.

The text is normalised first, so that the forms below are found however they are dressed:
Unicode compatibility forms folded (NFKC: fullwidth ``ｐａｓｓｗｏｒｄ``), the Cyrillic and Greek
letters that look like Latin ones read as Latin, invisible characters (zero-width, bidi
controls, the soft hyphen) removed, and URL-encoding decoded (twice, for double encoding).
:func:`rekall.store.validate_handoff` also checks each two neighbouring list entries joined,
so a secret split across them is found. The rules:

* vendor token formats, anchored on their prefixes so that prose mentioning a prefix
  (``ghp_``, ``AKIA``, ``sk-learn``) does not match; HashiCorp Vault tokens, crypt(3) password
  hashes (shadow lines, bcrypt), Docker ``auths`` blobs, session cookies;
* a password in a URL (``scheme://user:password@host``), a ``.netrc`` line, a password on a
  command line (``--password X``, ``mysql -pX``, ``sshpass -p X``, ``curl -u user:X``,
  ``redis-cli -a X``);
* a value assigned to a secret-named key (``DB_PASSWORD=…``, ``PGPASSWORD=…``, ``"token": "…"``,
  ``pw: …``), whatever its alphabet, unless it is a placeholder (``$VAR``, ``<redacted>``,
  ``***``, ``changeme``), a reference to where the secret lives (``os.environ[…]``,
  ``settings.KEY``, ``get_secret()``, another secret-named identifier), a short number, or a word
  that says something about the secret (``password: required``);
* a password in prose (``the password for the admin account is …``, ``Das Passwort lautet …``,
  ``le mot de passe est …``, ``la contraseña es …``) under the same exceptions; for a secret, a
  token or a key in prose, a value that looks like a credential (letters with digits, or both
  cases with a symbol);
* a high-entropy value (16+ characters, letters and digits) within a few words after "api key",
  "secret", "token", "password" or "access key", labelled or not (a UUID is an id, not a secret).

The corpus in ``tests/store/secret_corpus.py`` decides these rules: every refused form is
caught and no legitimate text (SHAs, UUIDs, paths, prose about password fields or token
budgets, code identifiers) is. ``bench/secret_detectors.py`` compares them with ``detect-secrets``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator

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
    ("a HashiCorp Vault token", _NOT_TOKEN + r"hv[sbr]\.[A-Za-z0-9_-]{24,}"),
    ("a password hash", r"(?<![A-Za-z0-9$])\$(?:1|2[abxy]|5|6|y|gy|7|argon2(?:id|i|d))\$[A-Za-z0-9./$=,+-]{20,}"),
    ("a Docker registry credential", r'(?i)"(?:auth|identitytoken)"\s*:\s*"[A-Za-z0-9+/_-]{12,}={0,2}"'),
    ("a session cookie", r"(?i)(?<![A-Za-z0-9_.-])(?:PHPSESSID|JSESSIONID|ASP\.NET_SessionId|connect\.sid|"
                         r"laravel_session|_[a-z0-9]{1,30}_session|session_?id|sessid|sid)\s*=\s*"
                         r"(?=[^\s;]{0,200}[0-9])[A-Za-z0-9%._:/+=-]{16,}"),
)

# Every run is bounded or anchored by a look-behind, so that a search stays linear in the text
# (a handoff is up to 32,000 bytes, and an unanchored run would make a scan quadratic).
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s/:@]{0,256}:"
                           r"(?P<value>[^\s/@]{1,256})@")

#: A value: quoted (all of it, spaces included), or up to a space, quote, comma or semicolon.
_VALUE = r"""(?:"(?P<dq>[^"\n]{1,256})"|'(?P<sq>[^'\n]{1,256})'|(?P<bare>[^\s"',;]{1,256}))"""
#: Passwords on a command line and in ``.netrc``: the value follows the flag or keyword.
_COMMAND_LINE = tuple(re.compile(pattern) for pattern in (
    r"(?i)(?<![A-Za-z0-9_-])--(?:[a-z0-9]{1,20}-){0,3}(?:password|passwd|pass|pwd|passphrase|token|secret|api-?key"
    r"|access-key|secret-key|client-secret|auth-token)(?:=|[ \t]{1,8})" + _VALUE,
    r"(?<![A-Za-z0-9_-])(?:mysql|mariadb|mysqldump|mysqladmin|mysqlimport|mysqlsh)\b[^\n]{0,200}?[ \t]-p" + _VALUE,
    r"(?<![A-Za-z0-9_-])sshpass\b[^\n]{0,100}?[ \t]-p[ \t]{0,8}" + _VALUE,
    r"(?<![A-Za-z0-9_-])redis-cli\b[^\n]{0,200}?[ \t]-a[ \t]{1,8}" + _VALUE,
    r"(?<![A-Za-z0-9_-])curl\b[^\n]{0,200}?[ \t](?:-u|--user)[ \t]{1,8}[\"']?[^\s:\"']{1,100}:" + _VALUE,
    r"(?i)(?<![A-Za-z0-9_-])login\s{1,8}[^\s]{1,256}\s{1,8}password\s{1,8}" + _VALUE,
))

# A key whose value is a secret: the last word of the identifier names it (DB_PASSWORD,
# PGPASSWORD, aws_secret_access_key, client_secret, auth_token), so password_field or
# token_budget do not. A long name may follow any identifier prefix (bounded: the search stays
# linear); a short one (pw, pass) starts a word or follows a separator (_ . -).
_PASSWORD_WORDS = (r"pass(?:word|wd|phrase)|passwort|kennwort|wachtwoord|contrase[ñn]a|senha|lösenord|salasana"
                   r"|mot[ _-]de[ _-]passe|пароль|hasło|haslo|parola(?:[ _-]d[ei][ _-]?(?:ordine|accesso))?")
_SECRET_WORDS = (r"secret|token|api[_ -]?key|access[_ -]?key|auth[_ -]?key|private[_ -]?key|secret[_ -]?key"
                 r"|client[_ -]?secret|credentials?|auth[_ -]?token")
_KEY = (r"(?:(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]{0,40}?(?:(?P<long_password>" + _PASSWORD_WORDS + r")|" + _SECRET_WORDS
        + r")|(?:(?<=[_.-])|(?<![A-Za-z0-9]))(?P<short_password>pw|pwd|pass|mdp))(?![A-Za-z0-9_])")
_ASSIGNED = re.compile(r"(?i)" + _KEY + r"[\"']?[ \t]{0,8}(?::=|=>|[:=])[ \t]{0,8}" + _VALUE)
#: "the password for the admin account is …": a few words may come between, then a verb.
_IN_PROSE = re.compile(
    r"(?i)" + _KEY + r"(?:[ \t]{1,8}(?:for|of|to|on|at|für|pour|de|del|para|per)(?:[ \t]{1,8}[^\s:=]{1,40}){1,4})?"
    r"[ \t]{1,8}(?:is|was|are|lautet|ist|war|est|était|es|era|è|é)(?:[ \t]{0,8}:)?[ \t]{1,8}" + _VALUE)
#: A random-looking value a few words after a word that names a secret, labelled or not.
_NEAR_A_KEYWORD = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?:api[ _-]?key|secret|token|password|passphrase|access[ _-]?key)s?(?![A-Za-z0-9])"
    r"[^\n]{0,40}?(?<![A-Za-z0-9_+/=.-])(?P<value>[A-Za-z0-9_+/.-]{16,256}={0,2})(?![A-Za-z0-9_+/=.-])")

# Values that say where a secret is, or hide it: $VAR, ${VAR}, <redacted>, ***, os.environ[...],
# get_secret(), settings.KEY, an environment variable's name.
_PLACEHOLDER = re.compile(r"\A[$<{*%]|[(\[]|\A[A-Z][A-Z0-9_]*\Z|\A[A-Za-z_]+\.[A-Za-z_.]+\Z")
_PLACEHOLDER_WORDS = frozenset({"password", "pass", "passwd", "secret", "changeme", "redacted", "none", "null",
                                "example", "placeholder", "hidden", "masked", "xxx", "xxxx", "xxxxxxxx", "true",
                                "false", "undefined", "nil", "empty", "todo", "tbd", "unset", "omitted", "removed"})
#: Another secret-named identifier is a reference (``password=new_password``), not the secret.
_REFERENCE = re.compile(r"(?i)(?:\A|[_.-])(?:password|passwd|pwd|pw|secret|token|key|credentials?)(?:\Z|[_.=-])")
#: Words that follow "the password is" (or "password:") in text about a password, not one.
_ABOUT_WORDS = frozenset("""
required optional mandatory needed incorrect invalid wrong correct missing blank set stored saved kept hashed
encrypted masked changed reset expired valid used managed rotated provided given generated sent shown entered
typed prompted asked requested defined configured specified supplied checked verified compared read taken passed
available unavailable enabled disabled known unknown same different weak strong secure insecure long short case
too not never only also still now then being to for of by with in at on from the a an your my our their its his
her this that what whatever see option flag argument parameter field prompt file protected accepted rejected
refused ignored cached logged printed echoed hidden visible readable ok fine good bad obsolete deprecated new old
here there inside below above elsewhere please must should will can may nötig erforderlich falsch
richtig gespeichert geändert requis obligatoire enregistré modifié requerida obligatoria incorrecta
guardada cambiada
""".split())


def _is_placeholder(value: str) -> bool:
    return value.lower() in _PLACEHOLDER_WORDS or _PLACEHOLDER.search(value) is not None


def _value(match: re.Match[str]) -> str:
    return match["dq"] or match["sq"] or match["bare"]


def _assigned_value(value: str, min_length: int) -> bool:
    """An assigned value that may be the secret itself: anything but a placeholder, a reference,
    a short number or a word about the secret (``required``, ``reset-by-admin``; a quoted phrase
    is a passphrase whatever its first word)."""
    value = value.rstrip(".)!?:")
    first_word = re.split(r"[-_.]", value, maxsplit=1)[0].lower()
    return (len(value) >= min_length and not _is_placeholder(value) and not _REFERENCE.search(value)
            and not (value.isdigit() and len(value) < 6) and not (" " not in value and first_word in _ABOUT_WORDS))


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


def _random_looking(value: str) -> bool:
    """16+ characters, digits among letters of both cases (or a fifth of them digits), spread like a
    random token (not a UUID)."""
    from rekall.kernel.ids import is_uuid

    value = value.strip(".=-_")
    digits = sum(c.isdigit() for c in value)
    mixed = any(c.isupper() for c in value) and any(c.islower() for c in value)
    if len(value) < 16 or is_uuid(value) or not digits or not any(c.isalpha() for c in value) \
            or not (mixed or digits >= len(value) / 5):
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 3.0


_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((kind, re.compile(p)) for kind, p in _VENDOR_TOKENS)

#: Cyrillic and Greek letters drawn like Latin ones, read as those (``pаssword`` with a Cyrillic а).
_LOOK_ALIKES = str.maketrans("аеорсухіјѕԁһкмтвнАЕОРСУХІЈЅВНКМТαοριτνκΑΒΕΗΙΚΜΝΟΡΤΧΥΖ",
                             "aeopcyxijsdhkmtbhAEOPCYXIJSBHKMTaopitvkABEHIKMNOPTXYZ")


def _forms(text: str) -> Iterator[str]:
    """``text`` normalised for matching, as written and with look-alikes read as Latin (a Cyrillic
    word stays one in the first), each then URL-decoded (up to twice) when that changes it."""
    import unicodedata
    from urllib.parse import unquote

    from rekall.kernel.characters import INVISIBLE

    written = INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    for form in dict.fromkeys((written, written.translate(_LOOK_ALIKES))):
        yield form
        for _ in range(2):
            if "%" not in form or (decoded := unquote(form)) == form:
                break
            form = decoded
            yield form


def credential_kind(text: str) -> str | None:
    """The kind of secret ``text`` appears to contain, or ``None``."""
    for form in _forms(text):
        kind = _kind(form)
        if kind is not None:
            return kind
    return None


def _kind(text: str) -> str | None:
    for kind, pattern in _RULES:
        if pattern.search(text):
            return kind
    for match in _URL_PASSWORD.finditer(text):
        value = match["value"]
        if len(value) >= 4 and not value.isdigit() and not _is_placeholder(value):  # digits: a port
            return "a password in a URL"
    for pattern in _COMMAND_LINE:
        if any(_assigned_value(_value(match), 4) for match in pattern.finditer(text)):
            return "a password on a command line"
    for match in _ASSIGNED.finditer(text):
        if _assigned_value(_value(match), 4):
            return "a password or secret value"
    for match in _IN_PROSE.finditer(text):
        is_password = match["long_password"] or match["short_password"]
        value = _value(match)
        if _assigned_value(value, 6) if is_password else _looks_like_a_secret(value):
            return "a password or secret value"
    for match in _NEAR_A_KEYWORD.finditer(text):
        if _random_looking(match["value"]):
            return "a random-looking value next to a word that names a secret"
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
