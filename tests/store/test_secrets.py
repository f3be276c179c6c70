"""The secret corpus through the handoff validator: every credential refused, every legitimate text kept."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rekall.kernel.errors import InvalidInput
from rekall.kernel.credentials import credential_kind, find_credential
from rekall.store import validate_handoff

from tests.jobkit import handoff
from tests.store.secret_corpus import ABOUT_AUTH, ADVERSARIAL, DOCUMENTED, LEGITIMATE, REFUSED, SPLIT


def test_the_corpus_covers_every_family_the_issue_names():
    families = {family for family, _ in REFUSED}
    assert {"password in prose", "assignment", "url with password", "jwt", "aws", "azure", "hugging face",
            "sendgrid", "twilio", "stripe", "sk- key", "private key"} <= families
    assert len(REFUSED) >= 70 and len(LEGITIMATE) >= 55


@pytest.mark.parametrize(("family", "secret"), REFUSED + DOCUMENTED,
                         ids=[f"{f}-{i}" for i, (f, _) in enumerate(REFUSED + DOCUMENTED)])
@pytest.mark.parametrize("where", ["summary", "preserve", "discard", "nextStep"])
def test_every_credential_in_the_corpus_is_refused_in_every_field_naming_the_field_not_the_value(
        family, secret, where):
    if where in ("preserve", "discard"):
        value, field = handoff(**{where: ["fine", secret]}), f"handoff.{where}[1]"
    else:
        value, field = handoff(**{where: secret}), f"handoff.{where}"
    with pytest.raises(InvalidInput) as caught:
        validate_handoff(value)
    error = caught.value
    assert error.field == field and error.code == "invalid_handoff"
    shown = f"{error} {error.to_dict()}"
    # Never echoed: neither the text nor any long word of it that holds a digit (the secret part).
    assert secret not in shown
    for word in secret.split():
        if len(word) >= 8 and any(c.isdigit() for c in word):
            assert word not in shown, word


@pytest.mark.parametrize("text", LEGITIMATE + ABOUT_AUTH)
def test_legitimate_handoff_text_is_never_taken_for_a_credential(text):
    value = handoff(summary=text, preserve=[text], discard=[text], nextStep=text)
    assert validate_handoff(value)["summary"] == text


@pytest.mark.parametrize("text", ADVERSARIAL, ids=lambda text: repr(text[:12]))
def test_full_size_texts_built_to_make_patterns_backtrack_are_scanned_and_pass(text):
    # Each pattern's runs are bounded or anchored, so this scan is linear; a quadratic
    # pattern would take minutes here (bench/secret_detectors.py reports the time).
    assert credential_kind(text) is None


@pytest.mark.parametrize(("first", "second"), SPLIT)
@pytest.mark.parametrize("where", ["preserve", "discard"])
def test_a_credential_split_across_two_neighbouring_entries_is_refused_naming_both(first, second, where):
    assert credential_kind(first) is None and credential_kind(second) is None
    with pytest.raises(InvalidInput) as caught:
        validate_handoff(handoff(**{where: ["fine", first, second]}))
    error = caught.value
    assert error.field == f"handoff.{where}[1]" and f"handoff.{where}[1] and [2] joined" in error.message
    assert first not in str(error) and second not in str(error)


def test_the_corpus_holds_every_form_issue_31_names():
    families = {family for family, _ in REFUSED}
    assert {"passphrase", "env variable", "command line", "netrc", "prose", "vault", "session cookie",
            "shadow hash", "docker auths", "unlabelled", "obfuscated"} <= families
    assert len(SPLIT) >= 3


def test_the_documented_forms_cover_every_tool_the_issue_names():
    assert {family for family, _ in DOCUMENTED} == {
        "docker", "kubectl", "azure sas", "rails", "google oauth", "pgpass", "redis", "htpasswd", "ldap", "zip",
        "net use", "powershell", "npmrc", "putty", "age", "atlassian", "sentry", "vault", "aws", "prose"}
    assert len(DOCUMENTED) >= 70 and len(ABOUT_AUTH) >= 60


@pytest.mark.parametrize(("text", "kind", "character"), [
    ("Deploy notes. docker login -u ci -p Sup3rS3cretPw ghcr.io", "a password on a command line", 15),
    ("two lines\nlocalhost:5432:*:postgres:correcthorse", "a PostgreSQL password file line", 11),
    ("see AGE-SECRET-KEY-1GFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPQ4EGAEX", "an age secret key", 5),
    ("key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "an AWS secret access key", 6),
])
def test_a_refusal_names_the_field_the_entry_the_position_and_the_family_never_the_value(text, kind, character):
    with pytest.raises(InvalidInput) as caught:
        validate_handoff(handoff(preserve=["fine", "also fine", text]))
    error = caught.value
    assert error.field == "handoff.preserve[2]"
    assert error.message.startswith(f"handoff.preserve[2] looks like it contains {kind} at character {character};")
    assert "once normalised" not in error.message and text.split()[-1] not in str(error.to_dict())


def test_a_position_found_once_normalised_says_so():
    found = find_credential("x p\u0430ssword=swordfish")  # a Cyrillic a
    assert found is not None and found.normalised and found.character == 3


#: Passwords as people choose them: letters, digits and a symbol inside (a value of letters and digits
#: alone may be shaped like a name in code, which prose after "password" may hold: the corpus has those).
_SECRETS = st.builds(lambda head, symbol, tail: head + symbol + tail,
                     st.text(alphabet="abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=4,
                             max_size=12),
                     st.sampled_from("!#$%&*@^"),
                     st.text(alphabet="abcdefghijkmnopqrstuvwxyz23456789", min_size=1, max_size=12)
                     ).filter(lambda v: any(c.isdigit() for c in v) and any(c.isalpha() for c in v))
_TEMPLATES = (
    "docker login -u deploy -p {} registry.example.com",
    "ldapsearch -x -D cn=admin,dc=example,dc=com -w {} -b dc=example,dc=com",
    "zip -P {} archive.zip report.pdf",
    "net use Z: \\\\fileserver\\share {} /user:CORP\\admin",
    "ConvertTo-SecureString '{}' -AsPlainText -Force",
    "db.example.com:5432:appdb:appuser:{}",
    "requirepass {}",
    "use password {} for the staging box",
    "creds admin/{}",
    "user admin, pw {}",
    "login with pwd {}",
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(template=st.sampled_from(_TEMPLATES), secret=_SECRETS, where=st.sampled_from(["summary", "preserve"]))
def test_a_secret_in_any_documented_form_is_refused_and_never_echoed(template, secret, where):
    text = template.format(secret)
    value = handoff(summary=text) if where == "summary" else handoff(preserve=[text])
    with pytest.raises(InvalidInput) as caught:
        validate_handoff(value)
    error = caught.value
    assert secret not in f"{error} {error.message} {error.hint} {error.to_dict()}"
