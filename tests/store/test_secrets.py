"""The secret corpus through the handoff validator: every credential refused, every legitimate text kept."""

from __future__ import annotations

import pytest

from rekall.kernel.errors import InvalidInput
from rekall.kernel.credentials import credential_kind
from rekall.store import validate_handoff

from tests.jobkit import handoff
from tests.store.secret_corpus import ADVERSARIAL, LEGITIMATE, REFUSED, SPLIT


def test_the_corpus_covers_every_family_the_issue_names():
    families = {family for family, _ in REFUSED}
    assert {"password in prose", "assignment", "url with password", "jwt", "aws", "azure", "hugging face",
            "sendgrid", "twilio", "stripe", "sk- key", "private key"} <= families
    assert len(REFUSED) >= 70 and len(LEGITIMATE) >= 55


@pytest.mark.parametrize(("family", "secret"), REFUSED, ids=[f"{f}-{i}" for i, (f, _) in enumerate(REFUSED)])
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


@pytest.mark.parametrize("text", LEGITIMATE)
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
