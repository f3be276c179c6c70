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
  (``ghp_``, ``AKIA``, ``sk-learn``) does not match; HashiCorp Vault tokens, password hashes
  (shadow lines, bcrypt, Apache ``$apr1$`` and ``{SHA}``), Docker ``auths`` blobs, session cookies,
  the secrets each tool's documentation shows (kubeconfig ``client-key-data``, Azure ``sig=``,
  PuTTY keys, ``.npmrc`` ``_auth``, age keys, Sentry DSNs, ...); a bare 40-character AWS secret key;
* a password in a URL (``scheme://user:password@host``), a ``.netrc`` or ``.pgpass`` line, a
  password on a command line (``--password X``, ``mysql -pX``, ``sshpass -p X``, ``curl -u user:X``,
  ``redis-cli -a X``, ``docker login -p X``, ``ldapsearch -w X``, ``zip -P X``, ``net use``,
  ``ConvertTo-SecureString -AsPlainText``), Redis ``requirepass`` and ``AUTH``;
* a value assigned to a secret-named key (``DB_PASSWORD=…``, ``PGPASSWORD=…``, ``"token": "…"``,
  ``pw: …``), whatever its alphabet, unless it is a placeholder (``$VAR``, ``<redacted>``,
  ``***``, ``changeme``), a reference to where the secret lives (``os.environ[…]``,
  ``settings.KEY``, ``get_secret()``, another secret-named identifier), a short number, or a word
  that says something about the secret (``password: required``);
* a password in prose (``the password for the admin account is …``, ``Das Passwort lautet …``,
  ``le mot de passe est …``, ``la contraseña es …``) under the same exceptions; for a secret, a
  token or a key in prose, a value that looks like a credential (letters with digits, or both
  cases with a symbol);
* a password right after the word in passing ("use password X", "pw X"), or joined to a user
  after "creds" ("creds admin/X"), when it looks like one;
* a high-entropy value (16+ characters, letters and digits) within a few words after "api key",
  "secret", "token", "password" or "access key", labelled or not (a UUID is an id, a name in code
  such as ``AuthServiceV2Impl`` a name, hex called a hash by a word before it a hash).

The corpora in ``tests/store/secret_corpus.py`` decide these rules: every refused form (and every
form in each tool's public documentation) is caught and no legitimate text (SHAs, UUIDs, paths,
prose about password fields or token budgets, code identifiers, prose about authentication work)
is. ``bench/secret_detectors.py`` compares them with ``detect-secrets``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import NamedTuple

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
    # Before Vault 1.10: s. (service), b. (batch), r. (recovery), then 24 characters of base62.
    ("a HashiCorp Vault token", r"(?<![A-Za-z0-9_.-])[sbr]\.(?=[A-Za-z0-9]{0,23}[0-9])(?=[A-Za-z0-9]{0,23}[A-Z])"
                                r"(?=[A-Za-z0-9]{0,23}[a-z])[A-Za-z0-9]{24}(?![A-Za-z0-9_-])"),
    ("a Docker personal access token", _NOT_WORD + r"dckr_pat_[A-Za-z0-9_-]{20,}"),
    ("a Google OAuth token", _NOT_TOKEN + r"(?:ya29\.[A-Za-z0-9_-]{20,}|1//0[A-Za-z0-9_-]{20,})"),
    ("an age secret key", r"AGE-SECRET-KEY-1[02-9AC-HJ-NP-Z]{50,}"),
    ("an Atlassian API token", _NOT_TOKEN + r"AT[AC]TT3x[A-Za-z0-9_=-]{20,}"),
    ("a Sentry DSN", r"(?i)https?://[0-9a-f]{32}(?::[0-9a-f]{32})?@[A-Za-z0-9.-]{1,253}(?::[0-9]{1,5})?/"
                     r"(?:[A-Za-z0-9._-]{1,100}/){0,5}[0-9]+"),
    ("an Azure shared access signature", r"(?i)(?<![A-Za-z0-9_])sig=[A-Za-z0-9%+/]{20,}={0,2}"),
    ("a kubeconfig client key", r"(?i)client-key-data\s*:\s*[A-Za-z0-9+/]{16,}"),
    ("a PuTTY private key", r"PuTTY-User-Key-File-[0-9]+:[ \t]*[a-z0-9-]+"
                            r"|Private-Lines:[ \t]*[0-9]+\s+[A-Za-z0-9+/]{16,}"),
    ("an npm registry credential", r"(?<![A-Za-z0-9])_auth[ \t]*=[ \t]*[A-Za-z0-9+/]{8,}={0,2}"),
    ("a password hash", r"(?<![A-Za-z0-9$])\$(?:1|apr1|2[abxy]|5|6|y|gy|7|argon2(?:id|i|d))\$[A-Za-z0-9./$=,+-]{20,}"),
    ("a password hash", r"\{S?SHA\}[A-Za-z0-9+/]{20,}={0,2}"),
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
    r"(?<![A-Za-z0-9_-])docker[ \t]{1,8}login\b[^\n]{0,200}?[ \t]-p(?:=|[ \t]{1,8})" + _VALUE,
    r"(?<![A-Za-z0-9_-])ldap(?:search|modify|add|delete|passwd|whoami|compare|modrdn|exop)\b[^\n]{0,300}?"
    r"[ \t]-[ws][ \t]{0,8}" + _VALUE,
    r"(?<![A-Za-z0-9_-])(?:zip|unzip|zipcloak|funzip)\b[^\n]{0,200}?[ \t]-P[ \t]{0,8}" + _VALUE,
    r"(?<![A-Za-z0-9_-])7z[ar]?\b[^\n]{0,200}?[ \t]-p" + _VALUE,
    r"(?<![A-Za-z0-9_-])htpasswd\b[^\n]{0,100}?[ \t]-[A-Za-z]{0,5}b[A-Za-z]{0,5}(?:[ \t]{1,8}[^\s-][^\s]{0,255}){1,2}"
    r"[ \t]{1,8}" + _VALUE,
    # redis.conf lines, and CONFIG SET: "requirepass foobared" (at a line's start: prose names the directive)
    r"(?im)(?:^[ \t]{0,8}|config[ \t]{1,8}set[ \t]{1,8})(?:requirepass|masterauth)[ \t]{1,8}" + _VALUE + r"[ \t]*$",
    r"(?i)(?<![A-Za-z0-9_-])ConvertTo-SecureString\b(?=[^\n]{0,300}-AsPlainText)[^\n]{0,200}?"
    r"(?:[ \t]-String[ \t]{1,8}|[ \t](?=[\"']))" + _VALUE,
))
#: ``.pgpass``: ``hostname:port:database:username:password``, one a line.
_PGPASS = re.compile(r"(?m)^[ \t]{0,8}[^\s:]{1,253}:(?:[0-9]{1,5}|\*):[^\s:]{1,63}:[^\s:]{1,63}:"
                     r"(?P<value>(?:[^\s:\\]|\\.){1,256})[ \t]*$")
#: Redis ``AUTH [username] password``: uppercase as the docs write it, and the password must look like one.
_REDIS_AUTH = re.compile(r"(?<![A-Za-z0-9_-])AUTH(?:[ \t]{1,8}[^\s]{1,64})?[ \t]{1,8}" + _VALUE)
#: ``net use [device] [\\host\share] [password] /user:...``: the password is the plain word among them.
_NET_USE = re.compile(r"(?i)(?<![A-Za-z0-9_-])net[ \t]{1,8}use\b[^\n]{0,100}?[ \t]\\\\[^\s\\]{1,253}\\[^\s]{0,255}"
                      r"(?P<args>[^\n]{0,400})")
_NET_USE_NOT_A_PASSWORD = re.compile(r"\A(?:/|\\\\|[A-Za-z]:\Z|\*\Z)")

# A key whose value is a secret: the last word of the identifier names it (DB_PASSWORD,
# PGPASSWORD, aws_secret_access_key, client_secret, auth_token), so password_field or
# token_budget do not. A long name may follow any identifier prefix (bounded: the search stays
# linear); a short one (pw, pass) starts a word or follows a separator (_ . -).
_PASSWORD_WORDS = (r"pass(?:word|wd|phrase)|passwort|kennwort|wachtwoord|contrase[ñn]a|senha|lösenord|salasana"
                   r"|mot[ _-]de[ _-]passe|пароль|hasło|haslo|parola(?:[ _-]d[ei][ _-]?(?:ordine|accesso))?")
_SECRET_WORDS = (r"secret|token|api[_ -]?key|access[_ -]?key|auth[_ -]?key|private[_ -]?key|secret[_ -]?key"
                 r"|client[_ -]?secret|credentials?|auth[_ -]?token|secret[_ -]?key[_ -]?base|master[_ -]?key")
_KEY = (r"(?:(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]{0,40}?(?:(?P<long_password>" + _PASSWORD_WORDS + r")|" + _SECRET_WORDS
        + r")|(?:(?<=[_.-])|(?<![A-Za-z0-9]))(?P<short_password>pw|pwd|pass|mdp))(?![A-Za-z0-9_])")
_ASSIGNED = re.compile(r"(?i)" + _KEY + r"[\"']?[ \t]{0,8}(?::=|=>|[:=])[ \t]{0,8}" + _VALUE)
#: "the password for the admin account is …": a few words may come between, then a verb.
_IN_PROSE = re.compile(
    r"(?i)" + _KEY + r"(?:[ \t]{1,8}(?:for|of|to|on|at|für|pour|de|del|para|per)(?:[ \t]{1,8}[^\s:=]{1,40}){1,4})?"
    r"[ \t]{1,8}(?:is|was|are|lautet|ist|war|est|était|es|era|è|é)(?:[ \t]{0,8}:)?[ \t]{1,8}" + _VALUE)
#: A password right after the word, as people write it in passing: "use password X for the box",
#: "user admin, pw X", "login with pwd X" (the value must look like one: see :func:`_looks_like_a_secret`).
_PASSWORD_THEN_VALUE = re.compile(r"(?i)(?<![A-Za-z0-9_-])(?:password|passwd|passphrase|passcode|pwd|pw)[ \t]{1,8}"
                                  + _VALUE)
#: A user and a password joined, after a word that says so: "creds admin/X", "credentials are root:X".
_USER_AND_PASSWORD = re.compile(
    r"(?i)(?<![A-Za-z0-9_-])(?:creds|credentials?|login|logins)(?:[ \t]{1,8}(?:are|is)|[ \t]{0,8}:)?[ \t]{1,8}"
    r"[A-Za-z0-9_.@\\-]{1,64}[ \t]{0,2}[/:][ \t]{0,2}" + _VALUE)
#: An AWS secret access key on its own: 40 characters of base64, both cases and a digit.
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[0-9])(?=[A-Za-z0-9/+]{0,39}[a-z])"
                         r"(?=[A-Za-z0-9/+]{0,39}[A-Z])(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")
#: Words that say the hex after them is a hash (a file's, a commit's), not a secret.
_HASH_WORDS = re.compile(r"(?i)(?<![A-Za-z0-9])(?:sha-?[0-9]{0,3}|md5|hash(?:es)?|digest|checksum|commit|git|blob"
                         r"|fingerprint|revision|rev)(?![A-Za-z])")
#: Names of algorithms and formats, which follow "password" in prose about one ("password SHA256").
_ALGORITHMS = re.compile(r"(?i)\A(?:sha-?[0-9]+|md[45]|argon2(?:id|i|d)?|bcrypt|scrypt|pbkdf2[a-z0-9-]*|base64|utf-?8"
                         r"|oauth2?|http2|hmac[a-z0-9-]*|aes[0-9-]*|rsa[0-9-]*|ed25519|x509|fido2|totp|hotp)\Z")
#: A random-looking value a few words after a word that names a secret, labelled or not.
_NEAR_A_KEYWORD = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?:api[ _-]?key|secret|token|password|passphrase|access[ _-]?key)s?(?![A-Za-z0-9])"
    r"[^\n]{0,40}?(?<![A-Za-z0-9_+/=.-])(?P<value>[A-Za-z0-9_+/.-]{16,256}={0,2})(?![A-Za-z0-9_+/=.-])")

# Values that say where a secret is, or hide it: $VAR, ${VAR}, $(cmd), %VAR%, <redacted>, ***, {{ secret }},
# os.environ[...], get_secret(), settings.KEY, an environment variable's name. (A value that merely
# starts with $ or % is not one: "$ecret99" is a password.)
_PLACEHOLDER = re.compile(r"\A(?:\$(?:[{(]|[A-Za-z_][A-Za-z0-9_]*\Z)|%[A-Za-z_][A-Za-z0-9_]*%\Z|[<{*])|[(\[]"
                          r"|\A[A-Z][A-Z0-9_]*\Z"
                          r"|\A[A-Za-z_]+\.[A-Za-z_.]+\Z")
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
    value = value.rstrip(".,)")
    if len(value) < 6 or _is_placeholder(value):
        return False
    has_letter = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    mixed_case_and_symbol = (any(c.isupper() for c in value) and any(c.islower() for c in value)
                             and any(not c.isalnum() and c not in "-_" for c in value))
    return has_letter and (has_digit or mixed_case_and_symbol)


def _identifier_like(value: str) -> bool:
    """A name in code (``AuthServiceV2Impl``, ``refresh_token_v2``, ``KeyValidator.verify256()``):
    two or more words of three letters or more, few and long pieces, at most two runs of digits.
    A random token changes case or turns to digits every character or two."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?", value):
        return False
    if re.search(r"[a-z][0-9]+[a-z]", value):
        return False  # digits inside a lower-case word (hunter2redis): a password's shape, not a name's
    pieces = re.findall(r"[A-Z]{2,}(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[A-Z]", value)
    words = [piece for piece in pieces if piece.isalpha() and len(piece) >= 3]
    digit_runs = sum(piece.isdigit() for piece in pieces)
    acronyms = sum(word.isupper() for word in words)
    return len(words) >= 2 and digit_runs <= 2 and len(pieces) * 3 <= len(value) and acronyms * 2 <= len(words) \
        and all(map(_a_word, words))


def _a_word(piece: str) -> bool:
    """A word of a name: an acronym (``HTTP``, ``PBKDF``), or letters that can be said (a vowel, and
    never five consonants in a row: ``Bhqoqfkx`` and ``Cdnp`` are not words)."""
    if piece.isupper():
        return len(piece) <= 5
    lower = piece.lower()
    has_vowel = re.search(r"[aeiou]", lower) is not None or (len(lower) <= 4 and "y" in lower)
    return has_vowel and re.search(r"[^aeiou]{5}", lower) is None


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


class Found(NamedTuple):
    """What :func:`find_credential` found: the kind of secret, and the (1-based) character where its
    form starts, in the text as written or, when ``normalised``, once normalised (look-alikes read as
    Latin, invisible characters removed, URL-encoding decoded)."""

    kind: str
    character: int
    normalised: bool


def find_credential(text: str) -> Found | None:
    """The first secret ``text`` appears to contain (its kind and where, never the secret), or ``None``."""
    for form in _forms(text):
        for kind, pattern, holds in _CHECKS:
            for match in pattern.finditer(form):
                if holds(match):
                    return Found(kind, match.start() + 1, form != text)
    return None


def credential_kind(text: str) -> str | None:
    """The kind of secret ``text`` appears to contain, or ``None``."""
    found = find_credential(text)
    return None if found is None else found.kind


def _always(match: re.Match[str]) -> bool:
    return True


def _url_password(match: re.Match[str]) -> bool:
    value = match["value"]
    return len(value) >= 4 and not value.isdigit() and not _is_placeholder(value)  # digits: a port


def _in_prose(match: re.Match[str]) -> bool:
    value = _value(match)
    is_password = match["long_password"] or match["short_password"]
    return _assigned_value(value, 6) if is_password else _a_secret_in_prose(value)


def _a_secret_in_prose(value: str) -> bool:
    """A value that looks like a secret, where prose might as well name a class or an algorithm
    ("token AuthServiceV2Impl", "password SHA256")."""
    value = value.rstrip(".,)")
    return _looks_like_a_secret(value) and not _identifier_like(value) and not _ALGORITHMS.match(value)


def _net_use_password(match: re.Match[str]) -> bool:
    return any(not _NET_USE_NOT_A_PASSWORD.match(word) and _looks_like_a_secret(word)
               for word in match["args"].split())


def _random_near_a_keyword(match: re.Match[str]) -> bool:
    value = match["value"]
    return _random_looking(value) and not _identifier_like(value) \
        and not _a_hash(match.string, match.start("value"), value)


def _a_hash(text: str, start: int, value: str) -> bool:
    """Hex that a word just before it calls a hash (``sha1 of the token file: …``, ``commit …``)."""
    return re.fullmatch(r"[0-9a-f]+|[0-9A-F]+", value) is not None \
        and _HASH_WORDS.search(text, max(0, start - 80), start) is not None


def _aws_secret(match: re.Match[str]) -> bool:
    value = match["value"]
    return _random_looking(value) and not all(_identifier_like(part) for part in re.split(r"[/+]", value) if part)


_PASSWORD_OR_SECRET = "a password or secret value"
_ON_A_COMMAND_LINE = "a password on a command line"
#: Every rule in the order tried: its kind, its pattern, and what a match must also hold.
_CHECKS: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], bool]], ...] = (
    *((kind, pattern, _always) for kind, pattern in _RULES),
    ("a password in a URL", _URL_PASSWORD, _url_password),
    *((_ON_A_COMMAND_LINE, pattern, lambda m: _assigned_value(_value(m), 4)) for pattern in _COMMAND_LINE),
    (_PASSWORD_OR_SECRET, _ASSIGNED, lambda m: _assigned_value(_value(m), 4)),
    (_PASSWORD_OR_SECRET, _IN_PROSE, _in_prose),
    ("a PostgreSQL password file line", _PGPASS, lambda m: _assigned_value(m["value"], 4)),
    (_ON_A_COMMAND_LINE, _REDIS_AUTH, lambda m: _looks_like_a_secret(_value(m))),
    (_ON_A_COMMAND_LINE, _NET_USE, _net_use_password),
    (_PASSWORD_OR_SECRET, _PASSWORD_THEN_VALUE, lambda m: _a_secret_in_prose(_value(m))),
    (_PASSWORD_OR_SECRET, _USER_AND_PASSWORD, lambda m: _looks_like_a_secret(_value(m))),
    ("a random-looking value next to a word that names a secret", _NEAR_A_KEYWORD, _random_near_a_keyword),
    ("an AWS secret access key", _AWS_SECRET, _aws_secret),
)


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
